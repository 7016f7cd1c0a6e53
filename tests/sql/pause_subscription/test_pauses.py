"""The subscription switch: pause_subscription (operator pauses), the fatal pause set by the claim,
subscription_pause (what a worker checks) and resume_subscription."""

import uuid

import pytest

from tests.sql.support import claim_at, db_error, make_flow, pause_row, q, q1, send_raw, start, step


def _fatal(flow: str = "f") -> int:
    start(flow)
    msg = send_raw(
        flow.lower(), {"flow_slug": flow, "run_id": str(uuid.uuid4()), "step_slug": "a", "task_index": 0}
    )
    assert [r["outcome"] for r in claim_at(flow.lower(), flow, [msg])] == ["fatal"]
    return msg


def _subscription_pause(flow: str, step_slug: str | None = None) -> dict[str, object]:
    if step_slug is None:
        return q1("select * from pgflow.subscription_pause(%s)", [flow])
    return q1("select * from pgflow.subscription_pause(%s, %s)", [flow, step_slug])


NO_PAUSE = {
    "flow_slug": None,
    "step_slug": None,
    "queue_name": None,
    "reason": None,
    "detail": None,
    "paused_at": None,
}


def test_operator_pause_is_stored_and_reported() -> None:
    make_flow("f", step("a"))
    make_flow("g", step("a"))
    row = q1("select * from pgflow.pause_subscription('f', detail => 'deploying v42')")
    assert (row["flow_slug"], row["step_slug"], row["queue_name"], row["reason"], row["detail"]) == (
        "f",
        "",
        "f",
        "operator",
        "deploying v42",
    )
    assert _subscription_pause("f")["reason"] == "operator"
    assert _subscription_pause("g") == NO_PAUSE


def test_operator_pause_does_not_replace_a_fatal_one() -> None:
    make_flow("f", step("a"))
    msg = _fatal()
    fatal = pause_row("f")
    assert fatal["reason"] == "fatal" and str(msg) in fatal["detail"]
    row = q1("select * from pgflow.pause_subscription('f', '', 'operator', 'deploy')")
    assert (row["reason"], row["detail"]) == ("fatal", fatal["detail"])
    assert pause_row("f") == fatal


def test_a_fatal_claim_replaces_an_operator_pause() -> None:
    make_flow("f", step("a"))
    q("select pgflow.pause_subscription('f', detail => 'deploy')")
    msg = _fatal()
    row = pause_row("f")
    assert row["reason"] == "fatal"
    assert str(msg) in row["detail"]


@pytest.mark.parametrize("kind", ["operator", "fatal"])
def test_resume_clears_either_pause(kind: str) -> None:
    make_flow("f", step("a"))
    if kind == "fatal":
        _fatal()
    else:
        q("select pgflow.pause_subscription('f')")
    assert pause_row("f")["reason"] == kind
    assert q1("select pgflow.resume_subscription('f') as cleared") == {"cleared": True}
    assert pause_row("f") is None
    assert _subscription_pause("f") == NO_PAUSE
    assert q1("select pgflow.resume_subscription('f') as cleared") == {"cleared": False}


def test_a_flow_pause_holds_its_step_subscriptions_but_not_the_reverse() -> None:
    make_flow("f", step("a"), step("b"))
    q("select pgflow.pause_subscription('f', 'a')")
    assert _subscription_pause("f") == NO_PAUSE
    assert _subscription_pause("f", "a")["step_slug"] == "a"
    assert _subscription_pause("f", "b") == NO_PAUSE
    q("select pgflow.pause_subscription('f')")
    assert _subscription_pause("f", "b")["step_slug"] == ""
    assert _subscription_pause("f")["step_slug"] == ""


def test_fatal_pause_wins_over_an_operator_step_pause() -> None:
    make_flow("f", step("a"))
    q("select pgflow.pause_subscription('f', 'a')")
    _fatal()
    assert _subscription_pause("f", "a")["reason"] == "fatal"


def test_mixed_case_flow_pause_names_the_canonical_queue() -> None:
    make_flow("MyFlow", step("a"))
    row = q1("select * from pgflow.pause_subscription('MyFlow')")
    assert (row["flow_slug"], row["queue_name"]) == ("MyFlow", "myflow")


def test_unknown_flow_or_step_is_refused_and_nothing_stored() -> None:
    make_flow("f", step("a"))
    assert "does not exist" in db_error("select pgflow.pause_subscription('ghost')")
    assert "has no step" in db_error("select pgflow.pause_subscription('f', 'zzz')")
    assert q("select * from pgflow.worker_pauses") == []
