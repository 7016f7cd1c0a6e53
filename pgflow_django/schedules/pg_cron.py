"""``PGFLOW["SCHEDULER"] = "pg_cron"``: a pg_cron job in the project's database calls
``pgflow.fire_due_schedules()``, so due ticks fire on the server's clock even while no worker runs.

The job is the same firing entry point the workers call, so it shares their guarantees: each tick
once, however many callers race. It fires what Python planned (the ``upcoming`` ticks that workers,
``pgflow_scheduler`` and every sync keep topped up) and, since SQL cannot call Python, not the ticks
of schedules whose input is a callable: those stay with the Python scheduler.

``sync_pg_cron_job`` makes the database match the setting: it registers or updates the job when the
setting asks for it and removes it when the setting goes back (or pgflow's schedule functions are
migrated away). ``migrate`` runs it after pgflow's migrations, and so does
``manage.py pgflow_schedules pg-cron``; it is idempotent and takes an advisory lock, so concurrent
deploys do not race.
"""

from __future__ import annotations

import re
from typing import Final, Literal, TypeAlias

from django.db import connections, transaction

from pgflow_django.db.query import fetch_all, fetch_one, fetch_value
from pgflow_django.schedules import queries

JOB_NAME: Final = "pgflow_fire_due_schedules"
COMMAND: Final = "select count(*) from pgflow.fire_due_schedules()"
EVERY_SECOND: Final = "1 seconds"
"""pg_cron >= 1.5 runs a job every second, a seconds-field cron's resolution."""
EVERY_MINUTE: Final = "* * * * *"
"""Older pg_cron runs jobs at most once a minute."""
LOCK_KEY: Final = "pgflow:pg_cron_job"

JobChange: TypeAlias = Literal["registered", "updated", "unchanged", "removed", "absent"]


class PgCronUnavailable(RuntimeError):
    """The setting asks for pg_cron but the database has no pg_cron extension; the message says how."""


def job_schedule(extversion: str) -> str:
    """How often the job runs on this pg_cron version."""
    parts = [int(part) for part in re.findall(r"\d+", extversion)[:2]] + [0, 0]
    return EVERY_SECOND if (parts[0], parts[1]) >= (1, 5) else EVERY_MINUTE


def sync_pg_cron_job(*, wanted: bool | None = None, using: str = "default") -> JobChange:
    """Register, update or remove the job so that it exists exactly when ``wanted`` (default: the
    setting is ``"pg_cron"`` and pgflow's schedules are migrated). Raises PgCronUnavailable."""
    from pgflow_django.conf import get_settings

    if wanted is None:
        wanted = get_settings().scheduler == "pg_cron"
    connection = connections[using]
    with transaction.atomic(using=using), connection.cursor() as cursor:
        fetch_value(cursor, queries.PG_CRON_JOB_LOCK, [LOCK_KEY])
        state = fetch_one(cursor, queries.PG_CRON_STATE)
        assert state is not None
        extversion = state.extversion
        if extversion is None:
            if wanted:
                raise PgCronUnavailable(_install_line(connection.settings_dict["NAME"]))
            return "absent"
        if not fetch_value(cursor, queries.PG_CRON_USABLE):
            if wanted:
                raise PgCronUnavailable(
                    "PGFLOW['SCHEDULER'] = 'pg_cron' but this database user may not use pg_cron: as a "
                    "superuser, GRANT USAGE ON SCHEMA cron TO the user (and SELECT on cron.job); or set "
                    "PGFLOW['SCHEDULER'] = 'workers'"
                )
            return "absent"  # a role that cannot see cron.job has no job there to remove
        jobs = fetch_all(cursor, queries.PG_CRON_JOBS, [JOB_NAME])
        if not (wanted and state.migrated):
            for job in jobs:
                fetch_value(cursor, queries.PG_CRON_UNSCHEDULE, [job.jobid])
            return "removed" if jobs else "absent"
        schedule = job_schedule(extversion)
        if [(job.schedule, job.command, job.active) for job in jobs] == [(schedule, COMMAND, True)]:
            return "unchanged"
        for job in jobs[1:]:
            fetch_value(cursor, queries.PG_CRON_UNSCHEDULE, [job.jobid])
        if jobs:
            fetch_value(cursor, queries.PG_CRON_ALTER_JOB, [jobs[0].jobid, schedule, COMMAND])
        else:
            fetch_value(cursor, queries.PG_CRON_SCHEDULE, [JOB_NAME, schedule, COMMAND])
        return "updated" if jobs else "registered"


def _install_line(database: str) -> str:
    return (
        f"PGFLOW['SCHEDULER'] = 'pg_cron' but database {database!r} has no pg_cron extension: install it "
        f"(Debian: apt-get install postgresql-15-cron), set shared_preload_libraries = 'pg_cron' and "
        f"cron.database_name = '{database}' in postgresql.conf, restart PostgreSQL, run CREATE EXTENSION "
        "pg_cron; or set PGFLOW['SCHEDULER'] = 'workers'"
    )


def sync_after_migrate(sender: object, using: str = "default", **kwargs: object) -> None:
    """``post_migrate`` receiver: the job follows the setting on every ``migrate`` (one line on failure)."""
    from django.core.management.base import CommandError
    from django.db import router

    if connections[using].vendor != "postgresql" or not router.allow_migrate(using, "pgflow"):
        return
    try:
        sync_pg_cron_job(using=using)
    except PgCronUnavailable as exc:
        raise CommandError(str(exc)) from None
