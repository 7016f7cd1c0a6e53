"""The invariant check of tests/ledger.py finds each kind of breakage it promises to find, so a scenario
that passes it proves something (a check that never fails would hide lost or duplicated work)."""

from __future__ import annotations

from django.db import connection

from tests.ledger import find_violations
from tests.sql.support import claim_one, complete, make_flow, q, send_raw, start, step, task


def _violations(**options: object) -> list[str]:
    with connection.cursor() as cursor:
        return find_violations(cursor, **options)  # type: ignore[arg-type]


def test_a_consistent_database_has_no_violations() -> None:
    make_flow("inv", step("a"), step("b", "a"))
    run_id = start("inv")
    assert _violations(require_terminal=False) == []
    assert complete(claim_one("inv"), 1) == "completed"
    assert complete(claim_one("inv"), 2) == "completed"
    assert q("select status from pgflow.runs where run_id = %s", [run_id]) == [{"status": "completed"}]
    assert _violations() == []


def test_each_breakage_is_reported() -> None:
    make_flow("inv", step("a"), step("b", "a"), max_attempts=2)
    run_id = start("inv")
    lost = task(run_id, "a")["message_id"]
    q("delete from pgmq.q_inv where msg_id = %s", [lost])
    orphan = send_raw("inv", {"anything": 1})
    q("update pgflow.step_tasks set attempts_count = 5 where run_id = %s", [run_id])

    found = "\n".join(_violations())
    assert f"queued task {run_id}/a/0 has no live message (queue inv, message {lost})" in found
    assert f"queue inv holds live messages [{orphan}] of no queued or started task" in found
    assert f"task {run_id}/a/0 has 5 attempts (max_attempts 2)" in found
    assert "remaining_tasks" not in found
    assert f"run {run_id} of inv is not terminal" in found

    assert not [
        v for v in _violations(require_terminal=False, preserved={"inv": {orphan}}) if "live messages" in v
    ], "a preserved message is not reported"


def test_counter_drift_and_leftovers_of_terminal_runs_are_reported() -> None:
    make_flow("inv", step("a"))
    run_id = start("inv")
    q("update pgflow.step_states set remaining_tasks = 2 where run_id = %s", [run_id])
    assert any("remaining_tasks 2 but 1 queued or started" in v for v in _violations(require_terminal=False))
    q("update pgflow.step_states set remaining_tasks = 1 where run_id = %s", [run_id])
    q("update pgflow.runs set status = 'failed', failed_at = now() where run_id = %s", [run_id])
    assert any(f"failed run {run_id} still has a queued task a/0" in v for v in _violations())
