"""Deleting a routed flow, and recompiling it locally, clean only that flow's own live messages on the
shared queues it uses, found through its task snapshots (issue 6, items 6 and 8): another flow's
messages, an unknown message, the archive and the queue itself stay, and the declaration too."""

from __future__ import annotations

from tests.sql.shared_queues.support import (
    BULK,
    FAST,
    STEPS,
    claim_shared,
    compile_routed,
    declared,
    listed,
    message_ids,
)
from tests.sql.step_queues.support import flow_row, tables
from tests.sql.support import archived_ids, complete, jb, live_ids, q, send_raw, shape, shape_step, start, val

A, B = "sq_support", "sq_other"


def scene() -> dict[str, set[int]]:
    """A (classify, enrich on FAST; deliver on BULK) and B (fetch on FAST), with A's runs queued,
    started and half done, B's run queued, and an unknown message. Returns message ids by owner."""
    compile_routed(A)
    compile_routed(B, {"fetch": FAST}, shape_step("fetch"))
    queued, started, done = start(A, {"n": 1}), start(A, {"n": 2}), start(A, {"n": 3})
    other = start(B, {})
    assert claim_shared(FAST, message_ids(started, "classify"), [(A, "classify")])[0]["outcome"] == "claimed"
    (first,) = claim_shared(FAST, message_ids(done, "classify"), [(A, "classify")])
    assert complete(first, "ok") == "completed"
    (second,) = claim_shared(FAST, message_ids(done, "enrich"), [(A, "enrich")])
    assert complete(second, "ok") == "completed"
    unknown = send_raw(FAST, {"app": "not pgflow"})
    return {
        "a_live_fast": {*message_ids(queued, "classify"), *message_ids(started, "classify")},
        "a_live_bulk": set(message_ids(done, "deliver")),
        "a_archived": {first["message_id"], second["message_id"]},
        "b_live": set(message_ids(other, "fetch")),
        "unknown": {unknown},
    }


def assert_only_a_is_gone(ids: dict[str, set[int]]) -> None:
    assert live_ids(FAST) == ids["b_live"] | ids["unknown"], (
        "A's live messages gone, B's and the unknown kept"
    )
    assert live_ids(BULK) == set(), "A's message on its other shared queue is gone too"
    assert ids["a_archived"] <= archived_ids(FAST), "the archive is kept"
    assert not ids["a_live_fast"] & archived_ids(FAST), "A's live messages were deleted, not archived"
    assert {FAST, BULK} <= listed() and {FAST, BULK} <= declared()
    assert tables(FAST) == tables(BULK) == {"q": True, "a": True}
    assert val("select count(*) as n from pgflow.step_tasks where flow_slug = %s", [B]) == 1


def test_deleting_a_flow_removes_only_its_own_live_messages() -> None:
    ids = scene()
    assert live_ids(FAST) == ids["a_live_fast"] | ids["b_live"] | ids["unknown"]
    assert live_ids(BULK) == ids["a_live_bulk"]
    q("select pgflow.delete_flow_and_data(%s)", [A])
    assert flow_row(A) is None
    assert val("select count(*) as n from pgflow.step_tasks where flow_slug = %s", [A]) == 0
    assert_only_a_is_gone(ids)
    assert flow_row(B) is not None


def test_local_recompilation_removes_only_the_flows_own_live_messages() -> None:
    ids = scene()
    changed = (shape_step("classify"), shape_step("enrich", "classify"))
    answer = compile_routed(A, {"classify": FAST, "enrich": BULK}, *changed, allow_recompile=True)
    assert answer["status"] == "recompiled", answer
    assert_only_a_is_gone(ids)
    assert val("select count(*) as n from pgflow.runs where flow_slug = %s", [A]) == 0


def test_deleting_every_flow_of_a_shared_queue_never_drops_it() -> None:
    ids = scene()
    q("select pgflow.delete_flow_and_data(%s)", [A])
    q("select pgflow.delete_flow_and_data(%s)", [B])
    assert {FAST, BULK} <= listed() and {FAST, BULK} <= declared()
    assert live_ids(FAST) == ids["unknown"], "the unknown message outlives every flow"
    assert ids["a_archived"] <= archived_ids(FAST)


def test_a_routed_flow_without_runs_is_deleted_and_compiled_again() -> None:
    compile_routed(A)
    q("select pgflow.delete_flow_and_data(%s)", [A])
    assert flow_row(A) is None and {FAST, BULK} <= listed()
    assert compile_routed(A)["status"] == "compiled"


def test_recompiling_a_plain_flow_as_routed_drops_only_its_private_queue() -> None:
    """The old plain queue was private: it goes with the old definition; the new route's shared queues
    are declared and kept."""
    q("select pgflow.ensure_flow_compiled('sq_switch', %s::jsonb)", [jb(shape(*STEPS))])
    start("sq_switch", {})
    answer = compile_routed("sq_switch", allow_recompile=True)
    assert answer["status"] == "recompiled", answer
    assert "sq_switch" not in listed() and {FAST, BULK} <= listed()
    run_id = start("sq_switch", {})
    assert message_ids(run_id, "classify")[0] in live_ids(FAST)


def test_deletion_skips_a_shared_queue_whose_table_is_gone() -> None:
    """A declared shared queue dropped by hand holds no messages to delete: the flow still goes."""
    compile_routed("sq_support")
    q("select pgflow.start_flow('sq_support', '{}'::jsonb)")
    q("select pgmq.drop_queue(%s)", [FAST])
    q("select pgflow.delete_flow_and_data('sq_support')")
    assert q("select * from pgflow.flows where flow_slug = 'sq_support'") == []
    assert q("select * from pgflow.step_tasks where flow_slug = 'sq_support'") == []
