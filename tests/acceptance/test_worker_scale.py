"""Many worker processes share thousands of map tasks: every effect happens exactly once, no task is
claimed twice, every worker takes part (the ledger harness counts).

Counts (issue 8, item 2): WORKERS workers x CONCURRENCY threads on RUNS x 100 map tasks (CI 4 x 4 on
1,000; ``make chaos`` 8 x 3 on 5,000). Private cluster: the workers hold many connections.
"""

from __future__ import annotations

import pytest

from tests import ledger
from tests.acceptance.faults import Rig, alive, scale

pytestmark = pytest.mark.slow

WORKERS, CONCURRENCY, RUNS, ITEMS = scale(4, 8), scale(4, 3), scale(10, 50), 100


def test_workers_run_every_map_task_exactly_once(cluster_rig: Rig) -> None:
    flow, db = ledger.LEDGER_FLOW, cluster_rig.db
    workers = cluster_rig.spawn.many(WORKERS, flow, "--concurrency", str(CONCURRENCY))
    runs = db.start(flow, [list(range(ITEMS))] * RUNS)
    db.wait_finished([flow], scale(180, 600))

    assert set(db.run_statuses(runs).values()) == {"completed"}
    assert len(db.effects(runs)) == RUNS * ITEMS
    tasks, attempts, claimers = db.rows(
        "select count(*), max(attempts_count), count(distinct last_worker_id) from pgflow.step_tasks "
        "where flow_slug = %s",
        [flow],
    )[0]
    assert (tasks, attempts) == (RUNS * ITEMS, 1), "no task was claimed twice"
    assert claimers == WORKERS, "every worker took part"
    alive(*workers)
    db.check(flow)
