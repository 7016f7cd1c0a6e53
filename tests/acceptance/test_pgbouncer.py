"""Workers through PgBouncer in transaction pooling mode (``PGFLOW["POOLER"] = "transaction"``): runs
complete with no prepared statement crossing pooled connections, LISTEN goes over a direct session or
the worker polls, and kill -9 of a worker, a restart of PgBouncer or of PostgreSQL behind it mid-run
loses nothing.

The pool is small (4 server connections for every worker's connections), so consecutive transactions
of one client land on different server connections, where a prepared statement would be missing.
"""

from __future__ import annotations

import os
import pwd
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import psycopg
import pytest

from tests import ledger
from tests.acceptance.faults import FAST, RECOVERY_AGE, Db, LedgerSpawner, Rig, alive
from tests.support.pgbouncer import PgBouncer
from tests.workers import WorkerProcess, wait_recovery_passes, wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

POLLING_LINE = "no LISTEN through a transaction pooler"
COMPLETED_TASKS = "select count(*) from pgflow.step_tasks where status = 'completed' and run_id = any(%s)"


class PooledSpawner(LedgerSpawner):
    """Ledger workers whose ``DATABASE_URL`` is the pooler (``tests/pooler_settings.py``)."""

    def __call__(self, flow: str, *args: str, ready: bool = True) -> WorkerProcess:
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("DJANGO_SETTINGS_MODULE", "tests.pooler_settings")
            return super(LedgerSpawner, self).__call__(flow, *args, ready=ready)


@pytest.fixture
def pgbouncer(database_url: str) -> Iterator[PgBouncer]:
    parts = urlsplit(database_url)
    query = parse_qs(parts.query)
    host = query.get("host", [parts.hostname or "127.0.0.1"])[0]
    port = int(query.get("port", [parts.port or 5432])[0])
    # a server reached through its socket directory (the embedded PostgreSQL): pgbouncer runs as the
    # directory's owner, who may enter it
    run_as = pwd.getpwuid(os.stat(host).st_uid).pw_name if host.startswith("/") else "postgres"
    bouncer = PgBouncer(host, port, parts.username or "postgres", run_as=run_as)
    yield bouncer
    bouncer.close()


@pytest.fixture
def pooled(database_url: str, pgbouncer: PgBouncer, tmp_path: Path) -> Iterator[Rig]:
    """Workers through the pooler; the scenario's own checks on a direct connection."""
    setup = Rig(database_url, PooledSpawner(pgbouncer.url(database_url), tmp_path))
    yield setup
    setup.close()


def rode_through_a_fault(*workers: WorkerProcess) -> None:
    """The fault reached the workers: one of them lost the database and carried on."""
    assert any(
        "database unavailable" in worker.log() or "recording results failed" in worker.log()
        for worker in workers
    ), "no worker noticed the fault"


def no_prepared_statement_errors(*workers: WorkerProcess) -> None:
    for worker in workers:
        assert "prepared statement" not in worker.log(), worker.log()[-4000:]


def test_runs_complete_through_pgbouncer_polling_without_a_direct_session(pooled: Rig) -> None:
    flow, db = ledger.LEDGER_FLOW, pooled.db
    workers = [pooled.spawn(flow, "--concurrency", "4", *FAST) for _ in range(2)]
    runs = db.start(flow, [[{"sleep": 0.01}] * 3] * 40)
    db.wait_finished([flow], 60)
    assert set(db.run_statuses(runs).values()) == {"completed"}
    assert len(db.effects(runs)) == 120
    for worker in workers:
        assert worker.log().count(POLLING_LINE) == 1, worker.log()
    assert db.backends("pgflow_worker listener") == set()
    no_prepared_statement_errors(*workers)
    alive(*workers)
    db.check(flow)


def test_listen_goes_over_the_direct_session_given_by_listen_url(pooled: Rig, database_url: str) -> None:
    flow, db = ledger.LEDGER_FLOW, pooled.db
    worker = pooled.spawn(flow, "--listen-url", database_url, "--max-poll-seconds", "30")
    wait_until(lambda: db.backends("pgflow_worker listener"), 15, "the listener's direct session")
    assert POLLING_LINE not in worker.log()
    runs = db.start(flow, [[{"sleep": 0.01}]] * 10)
    db.wait_finished([flow], 30)
    assert len(db.effects(runs)) == 10
    no_prepared_statement_errors(worker)
    db.check(flow)


def test_worker_killed_through_pgbouncer_loses_nothing(pooled: Rig) -> None:
    flow, db = ledger.LEDGER_FLOW, pooled.db
    doomed = pooled.spawn(flow, "--concurrency", "4", *FAST)
    runs = db.start(flow, [[{"sleep": 120}] * 4])
    wait_until(lambda: db.executions(runs) == 4, 20, "every handler to be mid-sleep")
    doomed.kill()
    rescuer = pooled.spawn(flow, "--concurrency", "4", *FAST, "--log-level", "debug")
    db.backdate(runs, RECOVERY_AGE)
    wait_recovery_passes(rescuer)
    db.wait_finished([flow], 30)
    assert set(db.run_statuses(runs).values()) == {"completed"}
    assert db.effects(runs) == [(2, rescuer.pid)] * 4, "one effect each, by the recovering attempt"
    no_prepared_statement_errors(rescuer)
    alive(rescuer)
    db.check(flow)


def test_pgbouncer_restarted_mid_run_loses_nothing(pooled: Rig, pgbouncer: PgBouncer) -> None:
    flow, db = ledger.LEDGER_FLOW, pooled.db
    workers = [pooled.spawn(flow, "--concurrency", "4", "--stalled-check-seconds", "1") for _ in range(2)]
    runs = db.start(flow, [[{"sleep": 0.05}] * 5] * 60)

    def completed() -> int:
        return int(db.val(COMPLETED_TASKS, [runs]))

    for restart in (1, 2):
        wait_until(lambda r=restart: completed() >= r * 100, 120, f"progress before restart {restart}")
        pgbouncer.restart()
    restarted = db.now()
    time.sleep(3)
    db.backdate_lost_claims(restarted)
    db.wait_finished([flow], 120)
    assert set(db.run_statuses(runs).values()) == {"completed"}
    assert len(db.effects(runs)) == 300
    alive(*workers)
    rode_through_a_fault(*workers)
    no_prepared_statement_errors(*workers)
    db.check(flow)


def test_postgresql_restarted_behind_pgbouncer_loses_nothing(private_cluster: Any, tmp_path: Path) -> None:
    """The private cluster (the test restarts it) behind its own PgBouncer: workers reach it only
    through the pooler, which reconnects to the restarted server on the workers' next transactions."""
    info = private_cluster.server.get_postmaster_info()
    host = info.socket_dir if info.socket_dir is not None else info.hostname
    bouncer = PgBouncer(
        str(host), int(info.port), "postgres", run_as=private_cluster.server.system_user or "postgres"
    )
    rig = Rig(private_cluster.url, PooledSpawner(bouncer.url(private_cluster.url), tmp_path))
    try:
        flow, db = ledger.LEDGER_FLOW, rig.db
        workers = [rig.spawn(flow, "--concurrency", "4", "--stalled-check-seconds", "1") for _ in range(2)]
        runs = db.start(flow, [[{"sleep": 0.05}] * 5] * 60)
        db.close()
        for restart in (1, 2):

            def progress(r: int = restart) -> bool:
                with psycopg.connect(private_cluster.url, autocommit=True) as conn:
                    row = conn.execute(COMPLETED_TASKS, [runs]).fetchone()
                return row is not None and int(row[0]) >= r * 100

            wait_until(progress, 120, f"progress before restart {restart}")
            private_cluster.restart()
        restarted = time.time()
        db = rig.db = Db(private_cluster.url)
        time.sleep(3)
        db.backdate_lost_claims(db.val("select to_timestamp(%s)", [restarted]))
        db.wait_finished([flow], 120)
        assert set(db.run_statuses(runs).values()) == {"completed"}
        assert len(db.effects(runs)) == 300
        alive(*workers)
        rode_through_a_fault(*workers)
        no_prepared_statement_errors(*workers)
        db.check(flow)
    finally:
        rig.close()
        bouncer.close()
