"""PostgreSQL restarted while 1,000 runs wait for an event or sleep (docs/durable.md): a wait is rows,
so after the restart every event still completes its wait, every sleep still ends at its time on the
worker's wait pass, and every run completes. Private cluster: the test restarts it."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.acceptance.conftest import PrivateCluster
from tests.acceptance.faults import FAST, Db, scale
from tests.workers import WorkerProcess, wait_until

pytestmark = pytest.mark.slow

WAITING, SLEEPING = scale(500, 2000), scale(500, 2000)
FLOWS = ("durable_approval", "durable_nap", "durable_reminder", "durable_orders", "durable_shipping")


def test_waiting_and_sleeping_runs_resume_after_a_postgresql_restart(
    private_cluster: PrivateCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = Db(private_cluster.url)
    for flow in FLOWS:
        db.val(
            "select count(*) from (select pgflow.delete_flow_and_data(f.flow_slug) from pgflow.flows as f"
            " where f.flow_slug = %s) as d",
            [flow],
        )
    monkeypatch.setenv("DJANGO_SETTINGS_MODULE", "tests.durable_settings")
    worker = WorkerProcess(
        private_cluster.url, "durable_approval", ["--flow", "durable_nap", *FAST], tmp_path / "worker.log"
    )
    worker.wait_ready(90)
    try:
        waiting = db.start("durable_approval", [{"order_id": i, "total": 1} for i in range(WAITING)])
        sleeping = db.start("durable_nap", [{} for _ in range(SLEEPING)])
        wait_until(
            lambda: db.val("select count(*) from pgflow.step_waits") == WAITING + SLEEPING,
            120,
            "every run to wait or sleep",
        )
        assert (
            db.val(
                "select count(*) from pgflow.step_tasks"
                " where status = 'started' and last_worker_id is not null"
            )
            == 0
        )

        private_cluster.restart()
        db.close()
        db = Db(private_cluster.url)
        restarted = db.now()
        assert db.val("select count(*) from pgflow.step_waits") == WAITING + SLEEPING  # the waits are rows

        sent = db.val(
            "select sum(pgflow.send_event('order.approved', '{\"by\": \"ops\"}', key => i::text))"
            " from generate_series(0, %s) as i",
            [WAITING - 1],
        )
        assert sent == WAITING
        time.sleep(2)
        db.backdate_lost_claims(restarted)  # claims the restart cut short, as recovery finds them later
        db.wait_finished(["durable_approval", "durable_nap"], scale(120, 300))
        statuses = db.run_statuses(waiting + sleeping)
        assert set(statuses.values()) == {"completed"}, {
            s: list(statuses.values()).count(s) for s in set(statuses.values())
        }
        assert db.val("select count(*) from pgflow.step_waits") == 0
        assert (
            db.val(
                "select count(*) from pgflow.step_states"
                " where run_id = any(%s::uuid[]) and step_slug = 'ship' and output->>'approved_by' = 'ops'",
                [waiting],
            )
            == WAITING
        )
    finally:
        worker.stop()
        db.close()
