"""Behaviour matched to pgflow where its own pgTAP suite (0.14.1) holds it to a text, a cleanup or an
invariant (issue 42). Each test names the pgTAP test whose assertion it takes over.
"""

from __future__ import annotations

import uuid

import psycopg
import pytest
from django.db import IntegrityError, transaction

from tests.sql.support import (
    archived_ids,
    claim_one,
    complete,
    live_ids,
    make_flow,
    old_run_id,
    q,
    refusal,
    run,
    start,
    state,
    step,
    task,
    val,
)

# ------------------------------------------------- stable failure texts


def test_unmet_condition_with_fail_stores_pgflows_stable_message() -> None:
    """condition_evaluation/root_step_condition_unmet_fail.test.sql: 'Condition not met', a message
    pgflow's tests call stable."""
    make_flow("f", step("checked", required_input_pattern={"enabled": True}, when_unmet="fail"))
    run_id = start("f", {"enabled": False, "value": 42})
    failed = state(run_id, "checked")
    assert failed["status"] == "failed"
    assert failed["error_message"] == "Condition not met"
    assert val("select count(*) as n from pgflow.step_tasks where run_id = %s", [run_id]) == 0
    assert run(run_id)["status"] == "failed"


@pytest.mark.parametrize(
    ("output", "produced"),
    [({"items": [1, 2]}, "object"), ("text", "string"), (0, "number"), (True, "boolean"), (None, "null")],
)
def test_map_type_violation_stores_pgflows_texts(output: object, produced: str) -> None:
    """initial_tasks_null/non_array_to_map_should_fail.test.sql and
    type_violations/complete_task_type_violation_returns_failed_row.test.sql: the task says what it
    produced, the step which map expected an array from which dependency."""
    make_flow("f", step("producer"), step("consumer", "producer", step_type="map"))
    run_id = start("f")
    assert complete(claim_one("f"), output) == "failed"
    failed = task(run_id, "producer")
    assert failed["error_message"] == f"[TYPE_VIOLATION] Produced {produced} instead of array"
    (error,) = failed["attempt_errors"]
    assert (error["attempt"], error["error"]) == (1, failed["error_message"]), "the attempt is recorded"
    assert state(run_id, "producer")["error_message"] == (
        f"[TYPE_VIOLATION] Map step consumer expects array input but dependency producer produced {produced}"
    )
    assert run(run_id)["status"] == "failed"


# ------------------------------------------------- pruning a run cleans its queue


def test_prune_archives_the_live_messages_of_a_pruned_runs_unfinished_tasks() -> None:
    """maintenance/prune_cleans_orphaned_pgmq_messages.test.sql: a run failed by hand with its task's
    message still in the queue; pruning it leaves the queue empty (pgflow deletes the message, this
    engine archives it, as it archives every message whose task will not run)."""
    make_flow("f", step("step1"), step("step2", "step1"))
    run_id = start("f", run_id=old_run_id(31))  # an id of its time: a partitioned history prunes by id
    (msg_id,) = live_ids("f")
    q("update pgflow.runs set status = 'failed', failed_at = now() where run_id = %s", [run_id])
    q(
        "update pgflow.step_states set status = 'failed', failed_at = now()"
        " where run_id = %s and step_slug = 'step1'",
        [run_id],
    )
    other = start("f")  # a started run of the same flow keeps its message
    (other_msg,) = live_ids("f") - {msg_id}
    q(
        "update pgflow.runs set started_at = now() - interval '31 days',"
        " failed_at = now() - interval '31 days' where run_id = %s",
        [run_id],
    )

    pruned = val("select pgflow.prune_data_older_than(make_interval(days => 30)) as r")

    assert pruned["runs"] == 1 and pruned["step_tasks"] == 1
    assert val("select count(*) as n from pgflow.runs where run_id = %s", [run_id]) == 0
    assert live_ids("f") == {other_msg}, "the pruned run's message left the queue; the other run's stayed"
    assert msg_id in archived_ids("f")
    assert run(other)["status"] == "started"


# ------------------------------------------------- pgflow's invariants on step_states and step_tasks


def _violated(statement: str, params: list[object]) -> str:
    """The constraint a statement breaks (SQLSTATE 23514, check_violation)."""
    with pytest.raises(IntegrityError) as info, transaction.atomic():
        q(statement, params)
    cause = info.value.__cause__
    assert isinstance(cause, psycopg.errors.CheckViolation), cause
    assert cause.sqlstate == "23514"
    return str(cause.diag.constraint_name)


def _started_run() -> uuid.UUID:
    make_flow("f", step("a"), step("b", "a"))
    return start("f")


@pytest.mark.parametrize(
    ("change", "constraint"),
    [
        ("status = 'completed', remaining_tasks = 1", "status_and_remaining_tasks_match"),
        ("status = 'created'", "remaining_tasks_state_consistency"),
        ("initial_tasks = null", "initial_tasks_known_when_started"),
        ("output = '{\"x\": 1}'", "output_only_for_completed_or_null"),
        ("skip_reason = 'condition_unmet'", "skip_reason_matches_status"),
        ("completed_at = now(), failed_at = now()", "completed_at_or_failed_at_or_skipped_at"),
    ],
)
def test_step_states_refuse_rows_pgflow_refuses(change: str, constraint: str) -> None:
    """The CHECK constraints of pgflow's step_states (tables definitions, 0060_tables_runtime.sql):
    a row that breaks one, written by any bug or by hand, fails its statement."""
    run_id = _started_run()
    statement = f"update pgflow.step_states set {change} where run_id = %s and step_slug = 'a'"
    assert _violated(statement, [run_id]) == constraint


def test_a_skipped_step_has_no_remaining_tasks() -> None:
    run_id = _started_run()
    statement = (
        "update pgflow.step_states set status = 'skipped', skipped_at = now(), skip_reason = 'handler_failed'"
        " where run_id = %s and step_slug = 'a'"
    )
    assert _violated(statement, [run_id]) == "remaining_tasks_state_consistency"


def test_a_skipped_step_needs_its_reason() -> None:
    run_id = _started_run()
    statement = (
        "update pgflow.step_states set status = 'skipped', skipped_at = now(), remaining_tasks = null"
        " where run_id = %s and step_slug = 'b'"
    )
    assert _violated(statement, [run_id]) == "skip_reason_matches_status"


@pytest.mark.parametrize(
    ("change", "constraint"),
    [
        ("output = '1'", "output_valid_only_for_completed"),
        ("status = 'completed', completed_at = now(), failed_at = now()", "completed_at_or_failed_at"),
    ],
)
def test_step_tasks_refuse_rows_pgflow_refuses(change: str, constraint: str) -> None:
    run_id = _started_run()
    statement = f"update pgflow.step_tasks set {change} where run_id = %s and step_slug = 'a'"
    assert _violated(statement, [run_id]) == constraint


def test_a_failed_task_keeps_the_output_that_broke_a_map() -> None:
    """output_valid_only_for_completed allows failed tasks, as in pgflow: the output that broke a map
    stays on its task."""
    make_flow("f", step("a"), step("m", "a", step_type="map"))
    run_id = start("f")
    assert complete(claim_one("f"), {"not": "an array"}) == "failed"
    assert task(run_id, "a")["output"] == {"not": "an array"}


# ------------------------------------------------- pgflow's refusals, code and text


def test_a_map_step_with_more_than_one_dependency_is_refused_with_pgflows_text() -> None:
    """add_step/map_dependency_limit.test.sql."""
    make_flow("f", step("dep1"), step("dep2"), step("dep3"))
    assert refusal("select pgflow.add_step('f', 'invalid_map', '{dep1,dep2}', step_type => 'map')") == (
        "P0001",
        'Map step "invalid_map" can have at most one dependency, but 2 were provided: dep1, dep2',
    )
    assert refusal("select pgflow.add_step('f', 'invalid_map2', '{dep1,dep2,dep3}', step_type => 'map')") == (
        "P0001",
        'Map step "invalid_map2" can have at most one dependency, but 3 were provided: dep1, dep2, dep3',
    )


@pytest.mark.parametrize(
    ("input_sql", "got"),
    [
        ("'\"not an array\"'", "string"),
        ("'42'", "number"),
        ("'true'", "boolean"),
        ('\'{"key": "value"}\'', "object"),
        ("'null'", "null"),
    ],
)
def test_a_root_map_refuses_an_input_that_is_not_an_array_with_pgflows_text(input_sql: str, got: str) -> None:
    """start_flow/invalid_json_types.test.sql, root_map_array_validation.test.sql and
    null_input_validation.test.sql: P0001 and the text, which pgflow's client tests match too."""
    make_flow("f", step("root_map", step_type="map"))
    refused = refusal(f"select * from pgflow.start_flow('f', {input_sql}::jsonb)")
    assert refused == ("P0001", f"Flow f has root map steps but input is not an array (got {got})")
    assert val("select count(*) as n from pgflow.runs") == 0


def test_a_root_map_refuses_a_sql_null_input_with_pgflows_text() -> None:
    """start_flow/null_input_handling_issue.test.sql."""
    make_flow("f", step("root_map", step_type="map"))
    assert refusal("select * from pgflow.start_flow('f', null)") == (
        "P0001",
        "Flow f has root map steps but input is NULL",
    )


def test_a_batch_says_which_of_its_inputs_a_root_map_refuses() -> None:
    make_flow("f", step("root_map", step_type="map"))
    refused = refusal("select * from pgflow.start_flows('f', '[[1], [2], {\"a\": 1}]'::jsonb)")
    assert refused == (
        "P0001",
        "Flow f has root map steps but input is not an array (got object) (input 3 of 3)",
    )
    assert val("select count(*) as n from pgflow.runs") == 0
