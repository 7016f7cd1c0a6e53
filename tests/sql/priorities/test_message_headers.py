"""A task's priority travels in its PGMQ message's headers: the run's, else its step's default, else
its flow's; 0 sends no headers, so a queue without priorities gets pgflow's plain messages."""

from __future__ import annotations

from typing import Any

import pytest

from tests.sql.support import db_error, fail, make_flow, q, q1, qtable, start_tasks, step, val

pytestmark = pytest.mark.django_db


def start(flow: str, priority: int | None = None, input: str = "{}") -> Any:
    return q1(
        "select run_id from pgflow.start_flow(%s, %s::jsonb, null, null, %s::integer)",
        [flow, input, priority],
    )["run_id"]


def headers_by_step(flow: str, run_id: Any) -> dict[str, Any]:
    return {
        row["step"]: row["headers"]
        for row in q(
            f"select message->>'step_slug' as step, headers from pgmq.{qtable(flow)}"
            " where message->>'run_id' = %s::text",
            [str(run_id)],
        )
    }


def test_the_runs_priority_is_in_the_headers_and_on_the_run() -> None:
    make_flow("hp_run", step("a"))
    run_id = start("hp_run", 42)
    assert headers_by_step("hp_run", run_id) == {"a": {"priority": 42}}
    assert q1("select priority from pgflow.runs where run_id = %s", [run_id]) == {"priority": 42}


def test_priority_zero_and_no_priority_send_no_headers() -> None:
    make_flow("hp_zero", step("a"))
    assert headers_by_step("hp_zero", start("hp_zero", 0)) == {"a": None}
    assert headers_by_step("hp_zero", start("hp_zero")) == {"a": None}


def test_step_default_then_flow_default_apply_to_a_run_started_without_one() -> None:
    make_flow("hp_defaults", step("a"), step("b"))
    q("update pgflow.flows set opt_priority = -7 where flow_slug = 'hp_defaults'")
    q("update pgflow.steps set opt_priority = 9 where flow_slug = 'hp_defaults' and step_slug = 'b'")
    assert headers_by_step("hp_defaults", start("hp_defaults")) == {
        "a": {"priority": -7},
        "b": {"priority": 9},
    }
    # an explicit priority wins over both defaults, for every step
    assert headers_by_step("hp_defaults", start("hp_defaults", 3)) == {
        "a": {"priority": 3},
        "b": {"priority": 3},
    }


def test_a_dependent_step_started_later_gets_the_runs_priority() -> None:
    make_flow("hp_chain", step("a"), step("b", "a"))
    run_id = start("hp_chain", 5)
    task = start_tasks("hp_chain", [q1(f"select msg_id from pgmq.{qtable('hp_chain')}")["msg_id"]])[0]
    val(
        "select pgflow.complete_task(%s::uuid, 'a', 0, %s, '{}'::jsonb)",
        [run_id, task["attempt"]],
    )
    assert headers_by_step("hp_chain", run_id) == {"b": {"priority": 5}}


def test_a_retry_shows_the_same_message_with_its_priority() -> None:
    make_flow("hp_retry", step("a"), max_attempts=3)
    run_id = start("hp_retry", 11)
    msg_id = q1(f"select msg_id from pgmq.{qtable('hp_retry')}")["msg_id"]
    task = start_tasks("hp_retry", [msg_id])[0]
    assert fail(task, retry_delay=0) == "retrying"
    row = q1(f"select msg_id, headers from pgmq.{qtable('hp_retry')}")
    assert row == {"msg_id": msg_id, "headers": {"priority": 11}}
    assert headers_by_step("hp_retry", run_id) == {"a": {"priority": 11}}


def test_retry_run_and_rerun_keep_the_priority() -> None:
    make_flow("hp_again", step("a"), max_attempts=1)
    run_id = start("hp_again", -20)
    msg_id = q1(f"select msg_id from pgmq.{qtable('hp_again')}")["msg_id"]
    assert fail(start_tasks("hp_again", [msg_id])[0]) == "failed"
    assert val("select pgflow.retry_run(%s)", [run_id]) == 1
    assert headers_by_step("hp_again", run_id) == {"a": {"priority": -20}}
    q(f"delete from pgmq.{qtable('hp_again')}")
    q(
        "update pgflow.runs set status = 'completed', completed_at = now(), remaining_steps = 0"
        " where run_id = %s",
        [run_id],
    )
    new_id = val("select pgflow.rerun(%s)", [run_id])
    assert q1("select priority from pgflow.runs where run_id = %s", [new_id]) == {"priority": -20}
    assert headers_by_step("hp_again", new_id) == {"a": {"priority": -20}}


@pytest.mark.parametrize("priority", [101, -101, 32768])
def test_an_out_of_range_priority_is_refused(priority: int) -> None:
    make_flow("hp_range", step("a"))
    error = db_error("select pgflow.start_flow('hp_range', '{}'::jsonb, null, null, %s::integer)", [priority])
    assert error.startswith(
        f"start_flows(hp_range): priority must be a whole number from -100 to 100, got {priority}"
    )


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        (None, 0),
        ("{}", 0),
        ('{"priority": 5}', 5),
        ('{"priority": -5}', -5),
        ('{"priority": 2.6}', 3),
        ('{"priority": 1e300}', 100),
        ('{"priority": -1e300}', -100),
        ('{"priority": "high"}', 0),
        ('{"priority": null}', 0),
        ("[1, 2]", 0),
        ('"text"', 0),
    ],
)
def test_message_priority_never_raises(headers: str | None, expected: int) -> None:
    assert val("select pgflow.message_priority(%s::jsonb)", [headers]) == expected
