"""Pins the behaviour docs/pgflow-differences.md describes where this engine departs from pgflow (issue
42: differences found by running pgflow's own pgTAP suite), so the page cannot drift from the engine.
Each test's docstring names the entry of "Behaviour that differs" it holds to; pgflow's behaviour (at
0.14.1) is in the entry, and the pgTAP test that asserts it is named where there is one.
"""

from __future__ import annotations

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
