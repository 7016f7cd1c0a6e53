"""PostgreSQL restarts in the middle of a run: workers reconnect on their own and every run completes,
each atomic task's effect recorded exactly once."""

from __future__ import annotations

import json

import pytest

from tests.acceptance.conftest import PrivateCluster
from tests.workers import Spawner, wait_until

pytestmark = pytest.mark.slow

LEDGER_RUNS, ITEMS, MAP_RUNS = 10, 30, 10


def test_workers_survive_a_postgresql_restart(
    private_cluster: PrivateCluster, cluster_workers: Spawner
) -> None:
    args = ("--concurrency", "4", "--stalled-check-seconds", "1")
    workers = [cluster_workers("example_ledger", *args) for _ in range(2)]
    workers.append(cluster_workers("example_map", *args))
    with private_cluster.connect() as conn:
        conn.execute(
            "select count(*) from pgflow.start_flows('example_ledger', %s::jsonb)",
            [json.dumps([[{"sleep": 0.05}] * ITEMS for _ in range(LEDGER_RUNS)])],
        )
        conn.execute(
            "select count(*) from pgflow.start_flows('example_map', %s::jsonb)",
            [json.dumps([{"count": 20} for _ in range(MAP_RUNS)])],
        )

        def some_done() -> bool:
            row = conn.execute("select count(*) from pgflow.step_tasks where status = 'completed'").fetchone()
            return row is not None and row[0] >= 40

        wait_until(some_done, 60, "the first tasks to complete")

    private_cluster.restart()

    with private_cluster.connect() as conn:

        def finished() -> bool:
            row = conn.execute("select count(*) from pgflow.runs where status <> 'started'").fetchone()
            return row is not None and row[0] == LEDGER_RUNS + MAP_RUNS

        wait_until(finished, 150, "every run to finish after the restart", interval=0.5)
        assert conn.execute("select distinct status from pgflow.runs").fetchall() == [("completed",)]
        total, distinct = conn.execute(
            "select count(*), count(distinct key) from example_ledgerentry"
        ).fetchone()
        assert (total, distinct) == (LEDGER_RUNS * ITEMS, LEDGER_RUNS * ITEMS)
    for worker in workers:
        assert worker.process.poll() is None, f"a worker exited:\n{worker.log()}"
    assert any("database unavailable" in worker.log() for worker in workers)
