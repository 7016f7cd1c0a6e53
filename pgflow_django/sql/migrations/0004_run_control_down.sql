-- Frozen migration delta 0004_run_control, backward.
drop function pgflow.rerun(uuid);
drop function pgflow.cancel_run(uuid);
alter table pgflow.runs drop column rerun_of;
