"""Priorities and idempotency keys through the django.tasks backend: ``task.using(priority=N)`` is the
run's claim priority (and the result's), out-of-range or non-integer priorities are refused in one
line naming the task, and ``task.using(idempotency_key=K)`` returns the existing result for the same
key, also to two callers at once."""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import connections, transaction

from testproject.example.tasks import add
from tests.sql.support import q, q1
from tests.tasks_support import backend, captured, clean_task_flows, task, tasks_api
from tests.workers import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

InvalidTask = tasks_api.InvalidTask


def plain(x: int) -> int:
    return x


@pytest.fixture(autouse=True)
def clean() -> Iterator[None]:
    clean_task_flows()
    yield
    clean_task_flows()


def message_headers(run_id: str) -> Any:
    return q1(
        "select headers from pgmq.q_default where message->>'run_id' = %s",
        [run_id],
    )["headers"]


def test_a_tasks_priority_is_its_runs_and_its_messages() -> None:
    urgent = add.using(priority=90).enqueue(1, 2)
    normal = add.enqueue(3, 4)
    low = add.using(priority=-100).enqueue(5, 6)
    assert urgent.task.priority == 90
    assert backend().get_result(urgent.id).task.priority == 90
    assert backend().get_result(low.id).task.priority == -100
    assert backend().get_result(normal.id).task.priority == 0
    assert message_headers(urgent.id) == {"priority": 90}
    assert message_headers(normal.id) is None
    assert message_headers(low.id) == {"priority": -100}
    priorities = {
        str(row["run_id"]): row["priority"]
        for row in q(
            "select run_id, priority from pgflow.runs where run_id = any(%s::uuid[])",
            [[urgent.id, normal.id, low.id]],
        )
    }
    assert priorities == {urgent.id: 90, normal.id: 0, low.id: -100}


@pytest.mark.parametrize("priority", [101, -101, 1.5, "high"])
def test_a_bad_priority_is_one_line_naming_the_task(priority: Any) -> None:
    with pytest.raises(InvalidTask) as info:
        add.using(priority=priority)
    message = str(info.value)
    assert message == (
        "priority of task testproject.example.tasks.add must be a whole number from -100 to 100 "
        f"(higher is claimed first), got {priority!r}"
    )
    with pytest.raises(InvalidTask, match="priority of task"):
        task(priority=priority)(plain)


def test_one_idempotency_key_is_one_result() -> None:
    keyed = add.using(idempotency_key="order-123")
    with captured(tasks_api.task_enqueued) as sent:
        first = keyed.enqueue(1, 2)
        again = keyed.enqueue(7, 8)
    assert again.id == first.id
    assert again.args == [1, 2], "the existing run is returned as it is"
    assert len(sent) == 1, "only the enqueue that started the run signals it"
    assert q1(
        "select count(*) as n from pgflow.runs where flow_slug like 'testproject_example_tasks_add%%'"
    ) == {"n": 1}
    assert add.using(idempotency_key="order-124").enqueue(1, 2).id != first.id
    assert add.enqueue(1, 2).id != first.id, "without a key every enqueue is a run"


@pytest.mark.parametrize(
    ("key", "reason"),
    [
        ("", "must be a non-empty string without NUL, got ''"),
        ("a\x00b", "must be a non-empty string without NUL"),
        ("\ud800", "is not valid UTF-8 text (it holds a lone surrogate, \\ud800); pass plain text"),
    ],
    ids=["empty", "NUL", "lone surrogate"],
)
def test_a_bad_idempotency_key_is_refused(key: str, reason: str) -> None:
    expected = f"idempotency_key of task testproject.example.tasks.add {reason}"
    with pytest.raises(InvalidTask) as at_using:
        add.using(idempotency_key=key)
    keyed = add.using(idempotency_key="fine")
    object.__setattr__(keyed, "idempotency_key", key)  # past the dataclass's own check
    with pytest.raises(InvalidTask) as at_enqueue:
        keyed.enqueue(1, 2)
    for caught in (at_using, at_enqueue):
        assert str(caught.value).startswith(expected) and "\n" not in str(caught.value)
    assert q1("select count(*) as n from pgflow.runs") == {"n": 0}


def test_two_concurrent_enqueues_with_one_key_get_one_run() -> None:
    keyed = add.using(idempotency_key="race-1")
    first_started = threading.Event()
    second_ready = threading.Event()
    commit_first = threading.Event()
    results: dict[str, Any] = {}

    def warm_up(name: str) -> None:
        """Each thread has its own backend (Django's per-thread handler), which compiles the task
        flow on its first enqueue: done before the race, so the callers race on the run alone."""
        add.using(idempotency_key=f"warm-up-{name}").enqueue(0, 0)

    def first() -> None:
        try:
            warm_up("first")
            with transaction.atomic():
                results["first"] = keyed.enqueue(1, 2).id
                first_started.set()
                assert commit_first.wait(10)
        finally:
            connections.close_all()

    def second() -> None:
        try:
            warm_up("second")
            second_ready.set()
            assert first_started.wait(10)
            results["second"] = keyed.enqueue(3, 4)
        except BaseException as exc:
            results["second"] = exc
        finally:
            connections.close_all()

    with captured(tasks_api.task_enqueued) as sent:
        b = threading.Thread(target=second)
        b.start()
        assert second_ready.wait(10)
        a = threading.Thread(target=first)
        a.start()
        assert first_started.wait(10)
        wait_until(
            lambda: q1(
                "select count(*) as n from pg_stat_activity where datname = current_database() "
                "and wait_event_type = 'Lock' and query like '%%start_flow%%'"
            )["n"],
            10,
            "the second enqueue to wait for the first",
        )
        assert "second" not in results
        commit_first.set()
        a.join(10)
        b.join(10)
    second_result = results["second"]
    assert not isinstance(second_result, BaseException), second_result
    assert second_result.id == results["first"]
    assert second_result.args == [1, 2]
    assert len(sent) == 3, "the two warm-ups and one of the racing enqueues"
    assert q1("select count(*) as n from pgflow.runs where run_id = %s::uuid", [results["first"]]) == {"n": 1}


def test_the_documented_tasks_example() -> None:
    doc = (Path(__file__).resolve().parents[2] / "docs" / "flow-control.md").read_text(encoding="utf-8")
    [example] = [block for block in re.findall(r"```python\n(.*?)```", doc, re.S) if ".using(" in block]
    exec(compile(example, "docs/flow-control.md", "exec"), {})
    assert q1(
        "select count(*) as n from pgflow.runs where flow_slug like 'testproject_example_tasks_add%%'"
    ) == {"n": 2}
