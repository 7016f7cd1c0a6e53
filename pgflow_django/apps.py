from typing import Any

from django.apps import AppConfig, apps
from django.db.models.signals import post_migrate, pre_migrate


class PgflowConfig(AppConfig):
    name = "pgflow_django"
    label = "pgflow"
    verbose_name = "pgflow workflows"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from pgflow_django import checks  # noqa: F401  (checks registers the system checks)
        from pgflow_django.db import lock_watcher
        from pgflow_django.migrations._squashed import refuse_partial_squash
        from pgflow_django.schedules.pg_cron import sync_after_migrate

        pre_migrate.connect(refuse_unsupported_database, sender=self, dispatch_uid="pgflow-database-guard")
        pre_migrate.connect(refuse_partial_squash, sender=self, dispatch_uid="pgflow-partial-squash")
        post_migrate.connect(sync_after_migrate, sender=self, dispatch_uid="pgflow-pg-cron-job")
        if apps.is_installed("pglock"):
            # django-pgmigrate's migrate: its lock watcher's session would outlive it (and block
            # the test runner's DROP DATABASE of the test database)
            lock_watcher.install()


def refuse_unsupported_database(sender: AppConfig, using: str, plan: Any = None, **kwargs: Any) -> None:
    """``migrate`` (even with ``--skip-checks``) stops with one line before pgflow's first migration
    touches a database that is not PostgreSQL >= 15; other apps' migrations alone are let through."""
    from django.core.management.base import CommandError
    from django.db import router

    from pgflow_django.db.dbguard import UnsupportedDatabase, require_postgresql

    ours = any(migration.app_label == sender.label and not backwards for migration, backwards in plan or ())
    if not ours or not router.allow_migrate(using, sender.label):
        return
    try:
        require_postgresql(using)
    except UnsupportedDatabase as exc:
        raise CommandError(str(exc)) from None
