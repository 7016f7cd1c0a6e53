"""``pgflow_schedules pause`` and ``trigger`` (the admin's operations call the same functions) while a
firing pass holds the schedule: each waits for the pass to commit, then acts once; the tick the pass
fired stays recorded once with its run, and a paused schedule fires nothing afterwards. Two real
connections (the pass, and the command in a subprocess), all data committed."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from django.db import connection

from pgflow_django.schedules.firing import fire_due
from tests import workers
from tests.integration.commands_support import SETTINGS_ENV
from tests.sql.schedules.committed import T0, committed_schedule, ledger, run_ids
from tests.sql.support import other_connection

pytestmark = pytest.mark.django_db


def _command(*args: str) -> subprocess.Popen[str]:
    url = workers.url_from_settings(connection.settings_dict)
    return subprocess.Popen(
        [sys.executable, str(workers.MANAGE), "pgflow_schedules", *args],
        cwd=workers.REPO,
        env={**os.environ, "DATABASE_URL": url, **SETTINGS_ENV},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _waits_on_a_lock(probe: psycopg.Connection[Any], process: subprocess.Popen[str]) -> bool:
    """The command's backend is blocked on a row lock (and the command has not exited)."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and process.poll() is None:
        waiting = probe.execute(
            "select count(*) from pg_stat_activity"
            " where datname = current_database() and wait_event_type = 'Lock' "
            "and query like '%%pgflow.schedules%%for update%%'"
        ).fetchone()
        if waiting and waiting[0]:
            return True
        time.sleep(0.05)
    return False


@pytest.mark.parametrize("operation", ["pause", "trigger"])
def test_an_operation_waits_for_a_firing_pass_then_acts_once(operation: str) -> None:
    flow, name = f"ops_race_{operation}", f"ops-race-{operation}"
    with committed_schedule(flow, name) as conn:
        firer, probe = other_connection(), other_connection()
        try:
            firer.execute("begin")
            with firer.cursor() as cursor:
                fired = fire_due(cursor, now=T0 + timedelta(seconds=1.5)).fired
            assert [tick.tick for tick in fired] == [T0 + timedelta(seconds=1)]
            command = _command(operation, name)
            assert _waits_on_a_lock(probe, command), command.communicate(timeout=5)
            firer.execute("commit")
            out, err = command.communicate(timeout=60)
            assert command.returncode == 0, err
        finally:
            firer.close()
            probe.close()
        kinds = [
            row[0]
            for row in conn.execute(
                "select kind from pgflow.schedule_ticks where schedule_name = %s order by fired_at", [name]
            ).fetchall()
        ]
        if operation == "pause":
            assert out.startswith(f"paused schedule {name}")
            assert kinds == ["cron"]
            with conn.transaction(), conn.cursor() as cursor:
                assert fire_due(cursor, now=T0 + timedelta(seconds=5.5)).fired == []
        else:
            assert out.startswith(f"triggered schedule {name}: run ")
            assert kinds == ["cron", "manual"]
        assert len(run_ids(conn, flow)) == len(ledger(conn, name)) == len(kinds)
