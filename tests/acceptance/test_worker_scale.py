"""Four worker processes share 2,000 tasks: each task runs exactly once (a database ledger counts)."""

from __future__ import annotations

import json

import pytest

from tests.acceptance.conftest import PrivateCluster
from tests.ledger import assert_invariants
from tests.workers import Spawner, wait_until

pytestmark = pytest.mark.slow

RUNS, ITEMS = 20, 100


def test_four_workers_run_two_thousand_tasks_exactly_once(
    private_cluster: PrivateCluster, cluster_workers: Spawner
) -> None:
    workers = [cluster_workers("example_ledger", "--concurrency", "4") for _ in range(4)]
    with private_cluster.connect() as conn:
        conn.execute(
            "select count(*) from pgflow.start_flows('example_ledger', %s::jsonb)",
            [json.dumps([list(range(ITEMS)) for _ in range(RUNS)])],
        )

        def finished() -> bool:
            row = conn.execute("select count(*) from pgflow.runs where status <> 'started'").fetchone()
            return row is not None and row[0] == RUNS

        wait_until(finished, 180, "all runs to finish", interval=0.5)
        statuses = conn.execute("select status, count(*) from pgflow.runs group by status").fetchall()
        assert statuses == [("completed", RUNS)]
        total, distinct = conn.execute(
            "select count(*), count(distinct key) from example_ledgerentry"
        ).fetchone()
        assert (total, distinct) == (RUNS * ITEMS, RUNS * ITEMS)
        tasks = conn.execute(
            "select count(*), max(attempts_count), count(distinct last_worker_id) from pgflow.step_tasks"
        ).fetchone()
        assert tasks[:2] == (RUNS * ITEMS, 1), "no task was claimed twice"
        assert tasks[2] == len(workers), "every worker took part"
        with conn.cursor() as cursor:
            assert_invariants(cursor)
