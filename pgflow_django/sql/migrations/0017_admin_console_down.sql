-- Down delta of 0017_admin_console: restores the definitions of the previous migration.

drop function pgflow.retry_run(uuid);
