"""Declared schedules follow the code: created, updated, paused when removed (history kept), declared
again; operator pauses survive a sync; names shared with runtime schedules are refused; and a
``@task`` is scheduled through the tasks backend."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from pgflow_django.schedules import (
    InvalidSchedule,
    ScheduleDeclared,
    create_schedule,
    declared_schedules,
    delete_schedule,
    edit_schedule,
    get_schedule,
    pause_schedule,
    resume_schedule,
    schedule,
    sync_declared_schedules,
)
from pgflow_django.schedules.declare import forget_declarations
from pgflow_django.schedules.definition import ScheduleSpec, build_spec
from tests.sql.schedules.support import fire, ledger, plan, probe_flow
from tests.sql.support import q, val

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def flow() -> str:
    return probe_flow()


def spec(name: str, cron: str = "*/5 * * * *", **options: Any) -> ScheduleSpec:
    return build_spec("sched_probe", cron=cron, name=name, **options)


def test_sync_creates_updates_and_leaves_unchanged() -> None:
    first = sync_declared_schedules([spec("a"), spec("b")])
    assert (first.created, first.updated, first.removed) == (["a", "b"], [], [])
    view = get_schedule("a")
    assert view.origin == "code" and view.active and len(view.upcoming) == 100
    assert sync_declared_schedules([spec("a"), spec("b")]).unchanged == ["a", "b"]
    changed = sync_declared_schedules([spec("a", cron="0 * * * *"), spec("b")])
    assert changed.updated == ["a"]
    assert all(tick.minute == 0 for tick in get_schedule("a").upcoming)
    assert get_schedule("a").revision == 2


def test_a_schedule_removed_from_code_is_paused_with_its_history_and_comes_back() -> None:
    sync_declared_schedules([spec("nightly", cron="* * * * *")])
    start = datetime(2026, 3, 1, 12, tzinfo=UTC)
    q("update pgflow.schedules set upcoming = '{}', planned_until = %s", [start])
    plan(start, ["nightly"])
    fire(start.replace(minute=1, second=30))
    assert len(ledger("nightly")) == 1
    assert sync_declared_schedules([]).removed == ["nightly"]
    view = get_schedule("nightly")
    assert view.paused_reason == "removed_from_code" and not view.active
    assert len(ledger("nightly")) == 1  # history kept
    assert fire(start.replace(minute=5, second=30)) == []
    with pytest.raises(ScheduleDeclared, match="removed from code"):
        resume_schedule("nightly")
    assert sync_declared_schedules([spec("nightly", cron="* * * * *")]).updated == ["nightly"]
    assert get_schedule("nightly").active


def test_an_operator_pause_survives_a_sync_and_declared_schedules_are_edited_in_code() -> None:
    sync_declared_schedules([spec("a")])
    pause_schedule("a", detail="incident 42")
    sync_declared_schedules([spec("a", cron="0 * * * *")])
    view = get_schedule("a")
    assert (
        view.paused_reason == "operator" and view.paused_detail == "incident 42" and view.cron == "0 * * * *"
    )
    with pytest.raises(ScheduleDeclared, match="declaration"):
        edit_schedule("a", cron="* * * * *")
    with pytest.raises(ScheduleDeclared, match="declared in code"):
        delete_schedule("a")
    sync_declared_schedules([])
    assert delete_schedule("a") == 0
    assert val("select count(*) from pgflow.schedules") == 0


def test_a_declared_name_taken_by_a_runtime_schedule_is_refused() -> None:
    create_schedule("sched_probe", cron="* * * * *", name="shared")
    with pytest.raises(InvalidSchedule, match="runtime schedule has that name"):
        sync_declared_schedules([spec("shared")])
    assert get_schedule("shared").origin == "runtime"


def test_schedule_registers_a_declaration_once_and_refuses_a_different_twin() -> None:
    try:
        declared = schedule("sched_probe", cron="0 6 * * *", name="registry-probe", timezone="Europe/Paris")
        assert (
            schedule("sched_probe", cron="0 6 * * *", name="registry-probe", timezone="Europe/Paris")
            == declared
        )
        with pytest.raises(InvalidSchedule, match="declared twice"):
            schedule("sched_probe", cron="0 7 * * *", name="registry-probe")
        assert declared in declared_schedules()
    finally:
        forget_declarations("registry-probe")


def test_a_task_is_scheduled_with_its_keyword_arguments() -> None:
    from testproject.example.tasks import add

    task_spec = build_spec(add, cron="* * * * *", input={"a": 2, "b": 3})
    assert task_spec.name == "testproject.example.tasks.add"
    sync_declared_schedules([task_spec])
    start = datetime(2026, 3, 1, 12, tzinfo=UTC)
    q("update pgflow.schedules set upcoming = '{}', planned_until = %s", [start])
    plan(start)
    [(name, _, run_id)] = fire(start.replace(minute=1, second=10))
    assert name == "testproject.example.tasks.add"
    run_input = val("select input::text from pgflow.runs where run_id = %s", [run_id])
    assert json.loads(run_input) == {
        "task": "testproject.example.tasks.add",
        "args": [],
        "kwargs": {"a": 2, "b": 3},
    }
    assert val("select flow_slug from pgflow.runs where run_id = %s", [run_id]) == task_spec.flow_slug


def test_enabling_again_plans_from_now_without_catching_up() -> None:
    create_schedule("sched_probe", cron="* * * * *", name="r", catch_up="all", enabled=False)
    assert fire(datetime.now(UTC)) == []
    view = edit_schedule("r", enabled=True)
    assert view.active and view.upcoming and view.upcoming[0] > datetime.now(UTC)


@pytest.fixture(autouse=True)
def no_leftover_declarations() -> Iterator[None]:
    yield
    forget_declarations("registry-probe")
