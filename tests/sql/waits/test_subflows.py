"""Subflow steps on the engine (docs/durable.md): a child run per task, started with the step in one
transaction; its end completes or fails the parent's task at the next wait pass; a failed parent
fails its unfinished children."""

from __future__ import annotations

import uuid
from typing import Any

from tests.sql.support import (
    claim,
    claim_one,
    compile_flow,
    complete,
    fail,
    q,
    q1,
    run,
    shape,
    shape_step,
    start,
    state,
    task,
    val,
    wake_waits,
)


def subflow_step(slug: str, child: str, *deps: str, **kw: Any) -> dict[str, Any]:
    return {**shape_step(slug, *deps, **kw), "wait": {"kind": "subflow", "flow": child}}


def children(run_id: uuid.UUID) -> list[dict[str, Any]]:
    return q(
        "select run_id, flow_slug, status, input, parent_step_slug, parent_task_index from pgflow.runs"
        " where parent_run_id = %s order by parent_task_index",
        [run_id],
    )


def test_a_child_run_completes_its_parents_step_with_its_output() -> None:
    compile_flow("sf_child", shape(shape_step("double")))
    compile_flow(
        "sf_parent", shape(shape_step("a"), subflow_step("sub", "sf_child", "a"), shape_step("b", "sub"))
    )
    parent = start("sf_parent", {"n": 1})
    complete(claim_one("sf_parent"), {"n": 21})

    [child] = children(parent)
    assert (child["flow_slug"], child["input"], child["parent_step_slug"]) == (
        "sf_child",
        {"a": {"n": 21}},
        "sub",
    )
    assert task(parent, "sub")["status"] == "started" and task(parent, "sub")["message_id"] is None
    complete(claim_one("sf_child"), 42)
    assert run(child["run_id"])["status"] == "completed"
    assert q1("select due_at is not null as due from pgflow.step_waits where run_id = %s", [parent])["due"]

    assert wake_waits() == {"completed": 1, "failed": 0}
    assert state(parent, "sub")["output"] == {"double": 42}
    assert claim_one("sf_parent")["step_slug"] == "b"


def test_the_map_form_starts_one_child_per_element_and_keeps_element_order() -> None:
    compile_flow("sf_map_child", shape(shape_step("echo")))
    compile_flow(
        "sf_map_parent",
        shape(shape_step("items"), subflow_step("each", "sf_map_child", "items", step_type="map")),
    )
    parent = start("sf_map_parent")
    complete(claim_one("sf_map_parent"), ["x", "y", "z"])
    kids = children(parent)
    assert [(k["input"], k["parent_task_index"]) for k in kids] == [("x", 0), ("y", 1), ("z", 2)]
    by_input = {r["run_id"]: r for r in claim("sf_map_child")}
    for rec in sorted(by_input.values(), key=lambda r: str(r["run_id"]), reverse=True):
        complete(rec, q1("select input from pgflow.runs where run_id = %s", [rec["run_id"]])["input"].upper())
    assert wake_waits()["completed"] == 3
    assert state(parent, "each")["output"] == [{"echo": "X"}, {"echo": "Y"}, {"echo": "Z"}]
    assert run(parent)["status"] == "completed"


def test_a_failed_child_fails_the_step_and_when_exhausted_applies() -> None:
    compile_flow("sf_fail_child", shape(shape_step("boom"), max_attempts=2))
    compile_flow(
        "sf_fail_parent",
        shape(subflow_step("sub", "sf_fail_child", when_exhausted="skip"), shape_step("after")),
    )
    parent = start("sf_fail_parent")
    [child] = children(parent)
    assert fail(claim_one("sf_fail_child"), "first") == "retrying"  # the child's own retries apply inside it
    q("update pgmq.q_sf_fail_child set vt = now() returning msg_id")
    assert fail(claim_one("sf_fail_child"), "second") == "failed"
    assert wake_waits() == {"completed": 0, "failed": 1}
    assert state(parent, "sub")["status"] == "skipped"
    assert (
        task(parent, "sub")["error_message"]
        == f"child run {child['run_id']} failed: step boom failed: second"
    )
    assert task(parent, "sub")["attempts_count"] == 1  # never a second child for the attempt
    assert len(children(parent)) == 1


def test_a_failed_parent_fails_its_unfinished_children_and_their_children() -> None:
    compile_flow("sf_leaf", shape(shape_step("wait_here")))
    compile_flow("sf_mid", shape(subflow_step("deeper", "sf_leaf")))
    compile_flow("sf_top", shape(subflow_step("sub", "sf_mid")))
    top = start("sf_top")
    [mid] = children(top)
    [leaf] = children(mid["run_id"])
    val("select pgflow.cancel_run(%s, 'changed my mind')", [top])
    assert run(mid["run_id"])["status"] == "failed"
    assert run(mid["run_id"])["error_message"] == f"parent run {top} failed"
    assert run(leaf["run_id"])["error_message"] == f"parent run {mid['run_id']} failed"
    assert val("select count(*) from pgflow.step_waits") == 0
    assert val("select count(*) from pgmq.q_sf_leaf") == 0  # its queued task's message is archived
    assert wake_waits() == {"completed": 0, "failed": 0}


def test_a_child_flow_that_is_not_compiled_fails_that_task_alone() -> None:
    compile_flow("sf_orphan", shape(shape_step("a"), subflow_step("sub", "sf_nowhere", "a")))
    good, bad = start("sf_orphan"), start("sf_orphan")
    records = {r["run_id"]: r for r in claim("sf_orphan")}
    complete(records[good], 1)
    complete(records[bad], 2)
    assert wake_waits()["failed"] == 2
    assert run(bad)["error_message"] == (
        "step sub failed: child flow sf_nowhere is not compiled: compile it"
        " (manage.py pgflow_compile sf_nowhere)"
    )


def test_a_child_that_ends_inside_its_own_start_completes_the_parent_step_at_the_next_pass() -> None:
    compile_flow("sf_empty_child", shape(shape_step("m", step_type="map")))
    compile_flow("sf_empty_parent", shape(subflow_step("sub", "sf_empty_child")))
    parent = start("sf_empty_parent", [])
    [child] = children(parent)
    assert child["status"] == "completed"
    assert wake_waits()["completed"] == 1
    assert run(parent)["output"] == {"sub": {"m": []}}


def test_retry_run_starts_one_new_child_for_the_new_attempt() -> None:
    compile_flow("sf_retry_child", shape(shape_step("x"), max_attempts=1))
    compile_flow("sf_retry_parent", shape(subflow_step("sub", "sf_retry_child")))
    parent = start("sf_retry_parent", {"k": 1})
    assert fail(claim_one("sf_retry_child"), "nope") == "failed"
    assert wake_waits()["failed"] == 1
    assert val("select pgflow.retry_run(%s)", [parent]) == 1
    first, second = children(parent)[0], children(parent)[1]
    assert {first["status"], second["status"]} == {"failed", "started"}
    complete(claim_one("sf_retry_child"), "ok")
    assert wake_waits()["completed"] == 1
    assert run(parent)["status"] == "completed" and task(parent, "sub")["attempts_count"] == 2


def test_get_runs_columns_name_parent_and_children() -> None:
    compile_flow("sf_view_child", shape(shape_step("x")))
    compile_flow("sf_view_parent", shape(subflow_step("sub", "sf_view_child")))
    parent = start("sf_view_parent")
    [child] = children(parent)
    assert q1(
        "select parent_run_id, parent_step_slug, parent_task_index from pgflow.runs where run_id = %s",
        [child["run_id"]],
    ) == {
        "parent_run_id": parent,
        "parent_step_slug": "sub",
        "parent_task_index": 0,
    }


def test_a_skipped_map_subflow_step_fails_its_other_children() -> None:
    compile_flow("sf_skip_child", shape(shape_step("x"), max_attempts=1))
    compile_flow(
        "sf_skip_parent",
        shape(
            shape_step("items"),
            subflow_step("each", "sf_skip_child", "items", step_type="map", when_exhausted="skip"),
        ),
    )
    parent = start("sf_skip_parent")
    complete(claim_one("sf_skip_parent"), ["a", "b"])
    first, second = children(parent)
    records = {r["run_id"]: r for r in claim("sf_skip_child")}
    assert fail(records[first["run_id"]], "no") == "failed"
    assert wake_waits() == {"completed": 0, "failed": 1}
    assert state(parent, "each")["status"] == "skipped"
    assert run(parent)["status"] == "completed"
    assert run(second["run_id"])["status"] == "failed"
    assert run(second["run_id"])["error_message"] == f"step each of parent run {parent} was skipped"
    assert val("select count(*) from pgflow.step_waits") == 0
    assert complete(records[second["run_id"]], "late") == "stale"


def test_deleting_a_child_flow_fails_the_parents_step() -> None:
    compile_flow("sf_gone_child", shape(shape_step("x")))
    compile_flow("sf_gone_parent", shape(subflow_step("sub", "sf_gone_child")))
    parent = start("sf_gone_parent")
    [child] = children(parent)
    val("select pgflow.delete_flow_and_data('sf_gone_child')")
    assert wake_waits() == {"completed": 0, "failed": 1}
    assert (
        run(parent)["error_message"]
        == f"step sub failed: child run {child['run_id']} failed: it no longer exists"
    )
