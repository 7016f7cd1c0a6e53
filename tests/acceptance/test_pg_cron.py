"""``PGFLOW["SCHEDULER"] = "pg_cron"`` against Debian's postgresql-15-cron (issue 17 item 3): on a
private PostgreSQL 15 cluster started here with pg_cron preloaded, ``migrate`` registers one job
calling ``pgflow.fire_due_schedules()``, registering again changes nothing, the job fires a due tick
by itself (no worker, no Python scheduler running), a Python scheduler racing it fires each tick once,
two registrations racing leave one job, and the job is removed when the setting goes back.

pg_cron 1.4 (Debian 12) runs jobs once a minute, so the test waits for minute boundaries: the one
wait on a real clock in the schedule tests, because here the clock is pg_cron's (two boundaries: the
job alone, then the race). The registration checks run while the first boundary comes: the job
fires a tick due meanwhile at the first boundary it is registered for (it is removed and registered
again by them), so their time is spent in the wait rather than after it.
"""

from __future__ import annotations

import itertools
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest

from pgflow_django.schedules.pg_cron import COMMAND, EVERY_MINUTE, JOB_NAME
from pgflow_django.schedules.planner import plan_schedules
from tests import workers

PG_BIN = Path("/usr/lib/postgresql/15/bin")
PG_CRON = Path("/usr/lib/postgresql/15/lib/pg_cron.so")
INSTALL = "apt-get install -y postgresql-15-cron"
DATABASE = "pgflow_cron"
WAIT_SECONDS = 90
"""Longest wait for pg_cron's next run (it runs at each minute boundary)."""

pytestmark = pytest.mark.slow


def _as_postgres(command: list[str]) -> list[str]:
    """initdb and the server refuse to run as root: run them as the postgres system user."""
    return ["runuser", "-u", "postgres", "--", *command] if os.geteuid() == 0 else command


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class CronCluster:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.pgdata = root / "pgdata"
        self.port = _free_port()
        self.url = f"postgresql://postgres@127.0.0.1:{self.port}/{DATABASE}"
        if os.geteuid() == 0:
            shutil.chown(root, "postgres")
        self._run(
            str(PG_BIN / "initdb"), "-D", str(self.pgdata), "-U", "postgres", "-A", "trust", "--no-sync"
        )
        with open(self.pgdata / "postgresql.conf", "a") as conf:
            conf.write(
                f"port = {self.port}\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = '{root}'\n"
                f"shared_preload_libraries = 'pg_cron'\ncron.database_name = '{DATABASE}'\n"
                "cron.use_background_workers = on\nmax_worker_processes = 16\nfsync = off\n"
            )
        self._pg_ctl("-w", "-t", "60", "-l", str(root / "server.log"), "start")
        with psycopg.connect(
            f"postgresql://postgres@127.0.0.1:{self.port}/postgres", autocommit=True
        ) as conn:
            conn.execute(f"create database {DATABASE}")
        with self.connect() as conn:
            conn.execute("create extension pg_cron")

    def _run(self, *command: str) -> None:
        subprocess.run(_as_postgres(list(command)), check=True, capture_output=True, timeout=120)

    def _pg_ctl(self, *args: str) -> None:
        self._run(str(PG_BIN / "pg_ctl"), "-D", str(self.pgdata), *args)

    def stop(self) -> None:
        self._pg_ctl("-w", "-m", "immediate", "stop")

    def connect(self) -> psycopg.Connection[Any]:
        return psycopg.connect(self.url, autocommit=True)

    def manage(self, scheduler: str, *args: str) -> subprocess.CompletedProcess[str]:
        env = {"DJANGO_SETTINGS_MODULE": "tests.pg_cron_settings", "PGFLOW_TEST_SCHEDULER": scheduler}
        return workers.run_manage(self.url, *args, env=env, timeout=300)

    def spawn(self, scheduler: str, *args: str) -> subprocess.Popen[str]:
        env = {
            **os.environ,
            "DATABASE_URL": self.url,
            "DJANGO_SETTINGS_MODULE": "tests.pg_cron_settings",
            "PGFLOW_TEST_SCHEDULER": scheduler,
        }
        return subprocess.Popen(
            [sys.executable, str(workers.MANAGE), *args],
            cwd=workers.REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def jobs(self) -> list[tuple[Any, ...]]:
        with self.connect() as conn:
            return conn.execute(
                "select jobname, schedule, command, database, active from cron.job"
            ).fetchall()


def _job_runs(conn: psycopg.Connection[Any]) -> list[tuple[Any, ...]]:
    """Every run of the job's command, also by a registration of the job since removed."""
    return conn.execute(
        "select d.status, d.command from cron.job_run_details as d where d.command = %s", [COMMAND]
    ).fetchall()


@pytest.fixture(scope="module")
def cron_cluster() -> Iterator[CronCluster]:
    if not PG_CRON.exists() or not (PG_BIN / "initdb").exists():
        pytest.skip(f"pg_cron for PostgreSQL 15 is not installed: {INSTALL}")
    root = Path(tempfile.mkdtemp(prefix="pgflow-pg-cron-"))
    cluster = CronCluster(root)
    try:
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)


def _registration_checks(cluster: CronCluster) -> None:
    """Registering again changes nothing; a database user without access to pg_cron: nothing to do by
    default, one line when asked for; the job is removed when the setting goes back, two
    registrations racing leave one job, and ``migrate`` follows the setting. Ends registered."""
    again = cluster.manage("pg_cron", "migrate", "--noinput")
    assert again.returncode == 0, again.stderr
    status = cluster.manage("pg_cron", "pgflow_schedules", "pg-cron")
    assert (status.returncode, status.stdout.strip()) == (
        0,
        f"pg_cron job {JOB_NAME} unchanged: it calls pgflow.fire_due_schedules()",
    )
    assert len(cluster.jobs()) == 1, "registering is idempotent"

    with cluster.connect() as conn:
        conn.execute("create role pgflow_app login")
    app_url = cluster.url.replace("postgres@", "pgflow_app@")
    env = {"DJANGO_SETTINGS_MODULE": "tests.pg_cron_settings"}
    quiet = workers.run_manage(
        app_url, "pgflow_schedules", "pg-cron", env={**env, "PGFLOW_TEST_SCHEDULER": "workers"}
    )
    assert quiet.returncode == 0 and "nothing changed" in quiet.stdout, quiet.stderr
    refused = workers.run_manage(
        app_url, "pgflow_schedules", "pg-cron", env={**env, "PGFLOW_TEST_SCHEDULER": "pg_cron"}
    )
    assert refused.returncode == 1
    assert refused.stderr.strip().splitlines() == [
        "CommandError: PGFLOW['SCHEDULER'] = 'pg_cron' but this database user may not use pg_cron: as a "
        "superuser, GRANT USAGE ON SCHEMA cron TO the user (and SELECT on cron.job); or set "
        "PGFLOW['SCHEDULER'] = 'workers'"
    ]
    assert len(cluster.jobs()) == 1, "the refused user changed nothing"

    removed = cluster.manage("workers", "pgflow_schedules", "pg-cron")
    assert (removed.returncode, removed.stdout.strip()) == (
        0,
        f"removed the pg_cron job {JOB_NAME}: PGFLOW['SCHEDULER'] is not 'pg_cron'",
    )
    assert cluster.jobs() == []
    racing = [cluster.spawn("pg_cron", "pgflow_schedules", "pg-cron") for _ in range(2)]
    said = sorted(process.communicate(timeout=120)[0].split()[3].rstrip(":") for process in racing)
    assert said == ["registered", "unchanged"] and len(cluster.jobs()) == 1, said
    assert cluster.manage("workers", "pgflow_schedules", "pg-cron").returncode == 0
    after = cluster.manage("workers", "migrate", "--noinput")
    assert after.returncode == 0 and cluster.jobs() == []
    back = cluster.manage("pg_cron", "migrate", "--noinput")
    assert back.returncode == 0, back.stderr
    assert cluster.jobs() == [(JOB_NAME, EVERY_MINUTE, COMMAND, DATABASE, True)], "migrate registers it again"


def test_the_pg_cron_job_fires_due_ticks_and_follows_the_setting(cron_cluster: CronCluster) -> None:
    migrated = cron_cluster.manage("pg_cron", "migrate", "--noinput")
    assert migrated.returncode == 0, migrated.stdout + migrated.stderr
    assert cron_cluster.jobs() == [(JOB_NAME, EVERY_MINUTE, COMMAND, DATABASE, True)]

    with cron_cluster.connect() as conn:
        conn.execute("select pgflow.create_flow('cron_probe')")
        conn.execute("select pgflow.add_step('cron_probe', 'only')")
        conn.execute(
            "insert into pgflow.schedules (schedule_name, flow_slug, cron, origin, planned_until, "
            "paused_reason) select n, 'cron_probe', '* * * * *', 'runtime', now() - interval '5 minutes', "
            "reason from (values ('cron-minutely', null), ('cron-paused', 'operator')) as v(n, reason)"
        )
        with conn.transaction(), conn.cursor() as cursor:
            planned_at = datetime.now(UTC)
            assert plan_schedules(cursor, now=planned_at) == ["cron-minutely"]
        _registration_checks(cron_cluster)  # while the first minute boundary comes
        # a tick the job fired before the checks removed it counts as fired, not as this proof
        (registered_at,) = conn.execute("select now()").fetchone() or (None,)
        started = time.monotonic()
        ticks: list[tuple[Any, ...]] = []
        while time.monotonic() - started < WAIT_SECONDS and not ticks:
            time.sleep(1)
            ticks = conn.execute(
                "select t.tick, t.run_id, r.flow_slug from pgflow.schedule_ticks as t "
                "left join pgflow.runs as r using (run_id) where t.schedule_name = 'cron-minutely'"
                " and t.tick >= %s order by t.tick",
                [registered_at],
            ).fetchall()
        log = (cron_cluster.root / "server.log").read_text()[-2000:]
        assert ticks, f"no tick fired within {WAIT_SECONDS} s; server log: {log}"
        tick, _, flow = ticks[0]
        assert flow == "cron_probe", "the tick's run was started in the same transaction"
        assert tick.second == 0 and tick <= datetime.now(UTC)
        details = _job_runs(conn)
        assert details and all(row == ("succeeded", COMMAND) for row in details), details
        assert conn.execute(
            "select count(*) from pgflow.schedule_ticks where schedule_name = 'cron-paused'"
        ).fetchone() == (0,)

        # a Python scheduler racing the job at the next minute boundary: the tick fires once
        scheduler = cron_cluster.spawn("pg_cron", "pgflow_scheduler", "--interval", "0.5")
        try:
            started = time.monotonic()
            while time.monotonic() - started < WAIT_SECONDS and len(_job_runs(conn)) <= len(details):
                time.sleep(1)
            time.sleep(2)
        finally:
            scheduler.send_signal(signal.SIGTERM)
            _, err = scheduler.communicate(timeout=30)
        assert scheduler.returncode == 0, err
        assert len(_job_runs(conn)) > len(details), "the job ran again meanwhile"
        ledger = [
            row[0]
            for row in conn.execute(
                "select tick from pgflow.schedule_ticks where schedule_name = 'cron-minutely' order by tick"
            ).fetchall()
        ]
        runs = conn.execute("select count(*) from pgflow.runs where flow_slug = 'cron_probe'").fetchone()[0]
        assert runs == len(ledger), (ledger, runs)
        since_registered = [moment for moment in ledger if moment >= tick]
        assert len(since_registered) >= 2, ledger
        assert [(b - a).total_seconds() for a, b in itertools.pairwise(since_registered)] == [60.0] * (
            len(since_registered) - 1
        )
