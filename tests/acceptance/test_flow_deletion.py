"""A flow deleted (``manage.py pgflow_delete_flow F --yes``) while its workers run, some handlers
mid-sleep: its workers stop cleanly (one error line, no crash loop), nothing of the flow remains, and
another flow's worker goes on unaffected, its effects exactly once.

Counts (issue 8, item 2): WORKERS workers of the deleted flow on RUNS runs of 24 tasks (CI 2 / 3;
``make chaos`` 4 / 20), beside one worker of another flow.
"""

from __future__ import annotations

import pytest

from tests import ledger
from tests.acceptance.faults import FAST, Rig, alive, scale
from tests.workers import run_manage, wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

WORKERS, RUNS = scale(2, 4), scale(3, 20)
FLOW_TABLES = ("flows", "steps", "deps", "runs", "step_states", "step_tasks", "worker_pauses")


def test_deleting_a_flow_under_its_running_workers(rig: Rig) -> None:
    doomed, other, db = ledger.DOOMED_FLOW, ledger.LEDGER_FLOW, rig.db
    doomed_workers = rig.spawn.many(WORKERS, doomed, "--concurrency", "2", *FAST)
    bystander = rig.spawn(other, "--concurrency", "2", *FAST)
    doomed_runs = db.start(doomed, [[{"sleep": 2}] * 4 + list(range(20))] * RUNS)
    other_runs = db.start(other, [list(range(20))] * RUNS)
    wait_until(lambda: db.executions(doomed_runs) >= 2 * WORKERS, 20, "the doomed flow's handlers to run")

    result = run_manage(
        db.url, "pgflow_delete_flow", doomed, "--yes", env={"DJANGO_SETTINGS_MODULE": ledger.SETTINGS_MODULE}
    )
    assert result.returncode == 0, result.stdout + result.stderr

    for worker in doomed_workers:
        code = worker.wait(30)
        log = worker.log()
        assert code == 0, log
        assert log.count("no longer exists") == 1, log
        assert "Traceback" not in log, log

    for table in FLOW_TABLES:
        assert db.val(f"select count(*) from pgflow.{table} where flow_slug = %s", [doomed]) == 0, table
    assert db.val("select count(*) from pgmq.meta where queue_name = %s", [doomed]) == 0
    assert db.val(
        "select to_regclass(%s) is null and to_regclass(%s) is null", [f"pgmq.q_{doomed}", f"pgmq.a_{doomed}"]
    )
    assert (
        db.val("select count(*) from pgflow.workers where queue_name = %s and stopped_at is null", [doomed])
        == 0
    ), "the stopped workers marked themselves stopped"

    more = db.start(other, [list(range(20))])
    db.wait_finished([other], 30)
    assert set(db.run_statuses(other_runs + more).values()) == {"completed"}
    alive(bystander)
    assert "Traceback" not in bystander.log()
    db.check(other)
