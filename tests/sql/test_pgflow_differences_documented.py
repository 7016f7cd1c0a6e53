"""Pins the behaviour docs/pgflow-differences.md describes where this engine departs from pgflow (issue
42: differences found by running pgflow's own pgTAP suite), so the page cannot drift from the engine.
Each test's docstring names the entry of "Behaviour that differs" it holds to; pgflow's behaviour (at
0.14.1) is in the entry, and the pgTAP test that asserts it is named where there is one.
"""

from __future__ import annotations

import pytest

from tests.sql.support import (
    add_step,
    backdate_started,
    claim,
    claim_one,
    complete,
    create_flow,
    db_error,
    fail,
    make_flow,
    new_worker,
    q,
    queue_exists,
    refusal,
    requeue_stalled,
    requeued_total,
    run,
    start,
    states,
    step,
    task,
    val,
    vt_in,
)


def _map_chain(flow_slug: str, length: int, head: str | None = None) -> None:
    """``length`` maps chained one after another (map_0 <- map_1 <- ...), map_0 depending on ``head``
    (a root map when None), as pgflow's cascade_iteration_limit.test.sql builds them."""
    add_step(flow_slug, "map_0", [] if head is None else [head], step_type="map")
    for i in range(1, length):
        add_step(flow_slug, f"map_{i}", [f"map_{i - 1}"], step_type="map")


# ------------------------------------------------- stalled-task recovery that requeues a task


def test_requeue_keeps_last_worker_id_and_started_at_and_sets_queued_at() -> None:
    """Entry "Stalled-task recovery that requeues a task keeps its last_worker_id and started_at ...":
    pgflow (requeue_stalled_tasks/basic_requeue.test.sql) clears both and leaves queued_at."""
    make_flow("f", step("a"), timeout=5)
    run_id = start("f")
    worker = new_worker("f")
    assert len(claim("f", worker_id=worker)) == 1
    backdate_started(run_id, "a", 36)  # 5 + 30 s ago, and a little more
    q("update pgflow.step_tasks set queued_at = now() - interval '40 seconds' where run_id = %s", [run_id])
    before = task(run_id, "a")
    assert before["status"] == "started" and before["last_worker_id"] == worker

    assert requeued_total(requeue_stalled()) == 1
    after = task(run_id, "a")
    assert after["status"] == "queued"
    assert after["requeued_count"] == 1
    assert after["last_worker_id"] == worker, "the worker whose attempt stalled stays named"
    assert after["started_at"] == before["started_at"], "and so does the start of that attempt"
    assert after["queued_at"] >= val("select now() as t"), "queued_at is the time of the requeue"
    assert after["attempt_errors"] == [], "a requeue records no error for the stalled attempt"


def test_retry_keeps_started_at_and_sets_queued_at() -> None:
    """Entry "A retried task keeps started_at of its last attempt ...; its queued_at becomes the time
    it was queued again": pgflow's fail_task sets started_at to NULL and leaves queued_at."""
    make_flow("f", step("a"), max_attempts=3)
    run_id = start("f")
    q("update pgflow.step_tasks set queued_at = now() - interval '1 minute' where run_id = %s", [run_id])
    rec = claim_one("f")
    started = task(run_id, "a")
    assert fail(rec, "boom") == "retrying"
    after = task(run_id, "a")
    assert after["status"] == "queued"
    assert after["started_at"] == started["started_at"]
    assert after["queued_at"] >= val("select now() as t") > started["queued_at"]


# ------------------------------------------------- create_flow creates no queue


def test_create_flow_creates_no_queue_until_a_step_is_added() -> None:
    """Entry "create_flow creates no PGMQ queue ...": pgflow (create_flow/flow_creation.test.sql)
    creates the queue flow_slug in create_flow."""
    create_flow("f")
    assert not queue_exists("f")
    add_step("f", "a")
    assert queue_exists("f")


def test_compiler_creates_the_default_queue_of_a_plain_flow_without_steps() -> None:
    """Entry "create_flow creates no PGMQ queue ...": the compiler creates the default queue of a plain
    flow without steps too."""
    q("select pgflow.ensure_flow_compiled('empty', '{\"steps\": []}'::jsonb)")
    assert queue_exists("empty")


# ------------------------------------------------- chains of empty maps of any length


def test_chain_of_51_empty_maps_completes_at_start() -> None:
    """Entry "A chain of maps over an empty array, each feeding the next, completes however long it
    is": pgflow's start_flow raises 'Cascade loop exceeded safety limit of 50 iterations' and creates
    no run (completing_taskless_steps/cascade_iteration_limit.test.sql, 51 maps; 50 are enough)."""
    create_flow("f")
    _map_chain("f", 51)
    run_id = start("f", [])
    row = run(run_id)
    assert row["status"] == "completed"
    assert row["remaining_steps"] == 0
    assert row["output"] == {"map_50": []}
    assert {s["status"] for s in states(run_id).values()} == {"completed"}


def test_chain_of_60_maps_emptied_by_a_completion_completes() -> None:
    """Entry "A chain of maps over an empty array, each feeding the next, completes however long it
    is": a complete_task whose [] output feeds the first map completes the run; in pgflow that
    complete_task raises and the task stays started."""
    create_flow("f")
    add_step("f", "root")
    _map_chain("f", 60, head="root")
    run_id = start("f")
    rec = claim_one("f")
    assert complete(rec, []) == "completed"
    row = run(run_id)
    assert row["status"] == "completed"
    assert row["output"] == {"map_59": []}
    assert task(run_id, "root")["status"] == "completed"


# ------------------------------------------------- set_vt_batch with ids and NULL offsets


def test_set_vt_batch_ids_with_null_offsets_is_an_error() -> None:
    """Entry "set_vt_batch with message ids but NULL offsets raises ...": pgflow
    (set_vt_batch/input_validation.test.sql) returns an empty set; NULL ids do nothing in both."""
    q("select pgmq.create('v')")
    msg_id = val("select pgmq.send('v', '{}'::jsonb) as id")
    q("update pgmq.q_v set vt = clock_timestamp() + interval '100 seconds' where msg_id = %s", [msg_id])
    message = db_error("select * from pgflow.set_vt_batch('v', %s::bigint[], null, 'set')", [[msg_id]])
    assert "1 message ids but 0 offsets" in message
    assert vt_in("v", msg_id) > 90, "nothing changed"
    for ids, offsets in (("null", "array[0]"), ("null", "null"), ("'{}'::bigint[]", "null")):
        count = val(f"select count(*) as n from pgflow.set_vt_batch('v', {ids}, {offsets}, 'set')")
        assert count == 0
    assert vt_in("v", msg_id) > 90


# ------------------------------------------------- redefining a step


def test_step_added_again_with_other_options_returns_the_stored_step() -> None:
    """Entry "Redefining a step under the same slug ...": a step added again with only other runtime
    options is not refused and keeps its stored options, as in pgflow (add_step/options.test.sql)."""
    create_flow("f")
    add_step("f", "twice", max_attempts=10, base_delay=15, timeout=90, start_delay=3)
    again = add_step("f", "twice", max_attempts=20, base_delay=30, timeout=30, start_delay=7)
    stored = (
        again["opt_max_attempts"],
        again["opt_base_delay"],
        again["opt_timeout"],
        again["opt_start_delay"],
    )
    assert stored == (10, 15, 90, 3)
    row = q("select opt_max_attempts, opt_base_delay, opt_timeout, opt_start_delay from pgflow.steps")
    assert row == [{"opt_max_attempts": 10, "opt_base_delay": 15, "opt_timeout": 90, "opt_start_delay": 3}]


def test_step_added_again_with_another_shape_is_refused() -> None:
    """Entry "Redefining a step under the same slug ...": other dependencies, step type, conditions,
    when_unmet or when_exhausted are refused with an error naming the step (pgflow returns the stored
    step, and inserts a new dependency into pgflow.deps)."""
    create_flow("f")
    add_step("f", "other")
    add_step("f", "twice")
    for change in (
        "deps_slugs => array['other']",
        "step_type => 'map'",
        "required_input_pattern => '{\"x\": 1}'::jsonb",
        "forbidden_input_pattern => '{\"x\": 1}'::jsonb",
        "when_unmet => 'fail'",
        "when_exhausted => 'skip'",
    ):
        message = db_error(f"select pgflow.add_step('f', 'twice', {change})")
        assert "f.twice already exists with a different definition" in message, change
    assert val("select count(*) as n from pgflow.deps where flow_slug = 'f'") == 0


# ------------------------------------------------- a stalled task counts as an attempt


def test_a_stalled_task_on_its_last_attempt_is_exhausted() -> None:
    """Entry "A task whose worker vanished on its last attempt is exhausted ...": with max_attempts 1,
    one stalled claim fails the task and the run. pgflow (requeue_stalled_tasks) requeues it while it
    was requeued fewer than 3 times, whatever its attempts, so the handler runs again."""
    make_flow("f", step("a"), max_attempts=1, timeout=5)
    run_id = start("f")
    claim_one("f")
    backdate_started(run_id, "a", 36)
    assert requeue_stalled() == {"requeued": 0, "permanently_stalled": 1}
    stalled = task(run_id, "a")
    assert stalled["status"] == "failed"
    assert stalled["requeued_count"] == 0
    assert stalled["permanently_stalled_at"] is not None
    assert run(run_id)["status"] == "failed"


def test_a_stalled_task_with_attempts_left_is_requeued() -> None:
    """Entry "A task whose worker vanished on its last attempt is exhausted ...": with attempts left the
    task is requeued as in pgflow, and the next claim is its next attempt."""
    make_flow("f", step("a"), max_attempts=2, timeout=5)
    run_id = start("f")
    assert claim_one("f")["attempt"] == 1
    backdate_started(run_id, "a", 36)
    assert requeue_stalled() == {"requeued": 1, "permanently_stalled": 0}
    assert task(run_id, "a")["status"] == "queued"
    assert claim_one("f")["attempt"] == 2
    backdate_started(run_id, "a", 36)
    assert requeue_stalled() == {"requeued": 0, "permanently_stalled": 1}
    assert run(run_id)["status"] == "failed"


# ------------------------------------------------- a SQL NULL output


def test_complete_task_with_a_sql_null_output_stores_json_null() -> None:
    """Entry "complete_task with a SQL NULL output stores JSON null ...": pgflow stores SQL NULL on the
    task and the step."""
    make_flow("f", step("a"), step("b", "a"))
    run_id = start("f")
    rec = claim_one("f")
    outcome = val(
        "select pgflow.complete_task(%s::uuid, %s, %s, %s, null) as outcome",
        [rec["run_id"], rec["step_slug"], rec["task_index"], rec["attempt"]],
    )
    assert outcome == "completed"
    stored = q(
        "select (select jsonb_typeof(t.output) from pgflow.step_tasks as t"
        "         where t.run_id = ss.run_id and t.step_slug = ss.step_slug) as task_output,"
        "       jsonb_typeof(ss.output) as step_output"
        "  from pgflow.step_states as ss where ss.run_id = %s and ss.step_slug = 'a'",
        [run_id],
    )
    assert stored == [{"task_output": "null", "step_output": "null"}]
    assert claim_one("f")["input"] == {"a": None}


# ------------------------------------------------- refusals that name the argument


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            "add_step('f', 'circular', '{a,circular}')",
            "step f.circular depends on itself: remove circular from its dependencies",
        ),
        (
            "add_step('f', 's', when_unmet => 'invalid_value')",
            "step f.s: when_unmet must be fail, skip or skip-cascade, got 'invalid_value'",
        ),
        (
            "add_step('f', 's', when_exhausted => null)",
            "step f.s: when_exhausted must be fail, skip or skip-cascade, got NULL",
        ),
        (
            "add_step('f', 's', required_input_pattern => '[]')",
            "step f.s: required_input_pattern must be a JSON object, got array",
        ),
        (
            "add_step('f', 's', forbidden_input_pattern => '\"x\"')",
            "step f.s: forbidden_input_pattern must be a JSON object, got string",
        ),
        ("add_step('f', 's', start_delay => -10)", "step f.s: start_delay must be >= 0, got -10"),
        ("add_step('f', 's', max_attempts => 0, timeout => 0)", "step f.s: max_attempts must be >= 1, got 0"),
        ("create_flow('g', timeout => 0)", "flow g: timeout must be >= 1, got 0"),
        (
            "add_step('f', 's', '{nonexistent_step}')",
            "step f.s depends on nonexistent_step, which does not exist in flow f:"
            " add dependencies before the steps that use them",
        ),
        (
            "add_step('nonexistent_flow', 's')",
            "flow 'nonexistent_flow' does not exist: create it with pgflow.create_flow first",
        ),
        ("start_flow('f', null)", "start_flow(f): input must not be NULL (use a JSON value, e.g. {})"),
    ],
)
def test_arguments_are_refused_with_a_line_that_names_them(call: str, message: str) -> None:
    """Entry "create_flow, add_step and start_flow check their arguments before they write ...": pgflow
    lets a table constraint refuse the row (add_step/circular_dependency, condition_invalid_values,
    condition_pattern_invalid_types, start_delay_options, nonexistent_dependency, nonexistent_flow)."""
    make_flow("f", step("a"))
    assert refusal(f"select pgflow.{call}") == ("22023", message)


def test_a_dependency_given_twice_is_one_dependency() -> None:
    """Entry "add_step collapses a dependency slug given twice ...": pgflow refuses it (23505); a map's
    dependencies are counted as given, as in pgflow."""
    make_flow("f", step("a"))
    assert add_step("f", "b", ["a", "a"])["deps_count"] == 1
    assert refusal("select pgflow.add_step('f', 'm', '{a,a}', step_type => 'map')")[0] == "P0001"


def test_set_vt_batch_lengths_that_differ_are_refused_with_the_fix() -> None:
    """Entry "set_vt_batch refuses ids and offsets of different lengths ...": pgflow's text is
    'msg_ids length (2) must equal vt_offsets length (1)' (set_vt_batch/input_validation.test.sql)."""
    q("select pgmq.create('v')")
    assert refusal("select * from pgflow.set_vt_batch('v', array[1, 2]::bigint[], array[30], 'set')") == (
        "P0001",
        "set_vt_batch: 2 message ids but 1 offsets; pass one offset per message id",
    )
