"""``PGFLOW["SCHEDULER"]`` on a database without pg_cron (the shared test server): the default and
"workers" leave it alone, "pg_cron" is one line saying how to install it, anything else is refused.
The job itself is tested against a real pg_cron in tests/acceptance/test_pg_cron.py."""

from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import CommandError
from django.db import connection
from django.test import override_settings

from pgflow_django.conf import get_settings
from pgflow_django.schedules.pg_cron import EVERY_MINUTE, EVERY_SECOND, job_schedule, sync_pg_cron_job
from tests.integration.commands_support import call
from tests.sql import support


def test_the_default_is_workers_and_touches_nothing() -> None:
    assert get_settings().scheduler == "workers"
    assert support.val("select count(*) from pg_extension where extname = 'pg_cron'") == 0
    assert sync_pg_cron_job() == "absent"
    out, _ = call("pgflow_schedules", "pg-cron")
    assert out.strip() == (
        "no pg_cron job pgflow_fire_due_schedules (PGFLOW['SCHEDULER'] is not 'pg_cron'); nothing changed"
    )


def test_pg_cron_without_the_extension_says_how_to_install_it() -> None:
    with override_settings(PGFLOW={"SCHEDULER": "pg_cron"}), pytest.raises(CommandError) as caught:
        call("pgflow_schedules", "pg-cron")
    message = str(caught.value)
    assert "\n" not in message
    database = connection.settings_dict["NAME"]
    assert message.startswith(f"PGFLOW['SCHEDULER'] = 'pg_cron' but database {database!r} has no pg_cron")
    assert f"cron.database_name = '{database}'" in message
    assert (
        "apt-get install postgresql-15-cron" in message and "shared_preload_libraries = 'pg_cron'" in message
    )
    assert message.endswith("or set PGFLOW['SCHEDULER'] = 'workers'")


def test_an_unknown_scheduler_is_refused() -> None:
    with override_settings(PGFLOW={"SCHEDULER": "celery"}), pytest.raises(ImproperlyConfigured) as caught:
        get_settings()
    assert str(caught.value) == "PGFLOW['SCHEDULER'] must be one of 'workers', 'pg_cron', got 'celery'"


@pytest.mark.parametrize(
    ("version", "expected"),
    [("1.4-1", EVERY_MINUTE), ("1.4.2", EVERY_MINUTE), ("1.5", EVERY_SECOND), ("1.6.4", EVERY_SECOND)],
)
def test_seconds_where_pg_cron_has_them(version: str, expected: str) -> None:
    assert job_schedule(version) == expected
