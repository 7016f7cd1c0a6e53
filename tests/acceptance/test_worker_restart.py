"""PostgreSQL restarted again and again while workers drain runs: the workers reconnect on their own
(no manual restart) and every run completes, each atomic effect exactly once.

Counts (issue 8, item 2): RESTARTS restarts during RUNS runs of 5 map tasks with WORKERS workers (CI
2 / 100 / 4; ``make chaos`` 5 / 500 / 4). Private cluster: the test restarts it.
"""

from __future__ import annotations

import time

import pytest

from tests import ledger
from tests.acceptance.conftest import PrivateCluster
from tests.acceptance.faults import Db, Rig, alive, scale
from tests.workers import wait_until

pytestmark = pytest.mark.slow

RESTARTS, RUNS, WORKERS, ITEMS = scale(2, 5), scale(100, 500), 4, 5


def test_workers_survive_repeated_postgresql_restarts(
    private_cluster: PrivateCluster, cluster_rig: Rig
) -> None:
    flow = ledger.LEDGER_FLOW
    workers = cluster_rig.spawn.many(WORKERS, flow, "--concurrency", "4", "--stalled-check-seconds", "1")
    runs = cluster_rig.db.start(flow, [[{"sleep": 0.05}] * ITEMS] * RUNS)
    cluster_rig.db.close()
    step = RUNS * ITEMS // (RESTARTS + 2)
    """Restart after every ``step`` more completed tasks, so each restart lands mid-drain."""

    def completed() -> int:
        db = Db(private_cluster.url)
        try:
            return int(db.val("select count(*) from pgflow.step_tasks where status = 'completed'"))
        finally:
            db.close()

    for restart in range(1, RESTARTS + 1):
        wait_until(lambda r=restart: completed() >= r * step, 120, f"progress before restart {restart}")
        private_cluster.restart()
    restarted = time.time()

    db = cluster_rig.db = Db(private_cluster.url)
    # Claims that were committed as the server went down never reached their workers: recovery takes
    # them back after the deadline, simulated by back-dating claims older than the last restart.
    time.sleep(3)
    db.backdate_lost_claims(db.val("select to_timestamp(%s)", [restarted]))
    db.wait_finished([flow], scale(120, 300))
    assert set(db.run_statuses(runs).values()) == {"completed"}
    assert len(db.effects(runs)) == RUNS * ITEMS
    alive(*workers)
    assert any("database unavailable" in worker.log() for worker in workers)
    db.check(flow)
