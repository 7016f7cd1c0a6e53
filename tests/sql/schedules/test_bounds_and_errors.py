"""Bounded work per call, a schedule whose flow is missing (the others still fire), and the planner's
backlog after planning stopped for longer than its plan lasted."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from pgflow_django.schedules import get_schedule
from pgflow_django.schedules.planner import PLAN_AHEAD, plan_ticks
from tests.sql.schedules.support import every_minute, fire, ledger, minute, probe_flow

pytestmark = pytest.mark.django_db


def test_each_call_fires_at_most_max_schedules() -> None:
    probe_flow()
    for index in range(5):
        every_minute(f"s{index}")
    assert len(fire(minute(1.5), max_schedules=2)) == 2
    assert len(fire(minute(1.5), max_schedules=2)) == 2
    assert len(fire(minute(1.5), max_schedules=2)) == 1
    assert fire(minute(1.5), max_schedules=2) == []
    assert all(ledger(f"s{index}") == [minute(1)] for index in range(5))


def test_a_schedule_of_a_missing_flow_keeps_its_ticks_and_the_others_fire() -> None:
    probe_flow()
    every_minute("good")
    every_minute("orphan", flow="not_compiled")
    assert [name for name, _, _ in fire(minute(1.5))] == ["good"]
    orphan = get_schedule("orphan")
    assert orphan.last_error and "not_compiled" in orphan.last_error and "does not exist" in orphan.last_error
    assert orphan.next_fire_at == minute(1) and ledger("orphan") == []
    probe_flow("not_compiled")
    assert [name for name, _, _ in fire(minute(2.5))] == ["good", "orphan"]
    assert ledger("orphan") == [minute(2)]  # catch_up="latest"
    assert get_schedule("orphan").last_error is None


def test_the_planner_backlog_after_a_long_gap_follows_the_policy() -> None:
    now = datetime(2026, 6, 1, 12, 0, 30, tzinfo=UTC)
    gap_start = now - timedelta(hours=5)
    for policy, backlog in (("all", 3), ("latest", 1), ("none", 1)):
        ticks = plan_ticks(
            "* * * * *", "UTC", catch_up=policy, max_catch_up=3, planned=0, after=gap_start, now=now
        )
        past = [tick for tick in ticks if tick <= now]
        assert past == [now.replace(second=0) - timedelta(minutes=n) for n in reversed(range(backlog))]
        assert len(ticks) - len(past) == PLAN_AHEAD


def test_an_expression_that_stops_matching_is_planned_to_its_end_once() -> None:
    from django.db import connection

    from pgflow_django.schedules import create_schedule, plan_schedules
    from tests.sql.support import val

    probe_flow()
    # every minute of the 1st and 21st that is also the month's last Monday: never
    view = create_schedule("sched_probe", cron="* * */20 * 1L", name="never")
    assert view.upcoming == () and view.next_fire_at is None
    assert val("select planned_until = 'infinity' from pgflow.schedules where schedule_name = 'never'")
    with connection.cursor() as cursor:
        assert plan_schedules(cursor, names=["never"]) == []  # not planned again on every pass


def test_an_input_its_flow_refuses_holds_back_its_own_schedule_not_its_flow_neighbours() -> None:
    """A flow whose root step is a map needs array inputs; pgflow.start_flows checks the inputs of
    one call together, so one schedule's object input used to hold back every schedule of the flow."""
    from tests.sql.support import make_flow, q, step

    make_flow("sched_mapped", step("each", step_type="map"))
    for name in ("list-a", "object", "list-b"):
        every_minute(name, "sched_mapped", input=[1, 2])
    q("update pgflow.schedules set input = '{\"not\": \"a list\"}' where schedule_name = 'object'")
    assert sorted(name for name, _, _ in fire(minute(1.5))) == ["list-a", "list-b"]
    held = get_schedule("object")
    assert held.last_error is not None and "root map step each needs an array input" in held.last_error
    assert held.next_fire_at == minute(1) and ledger("object") == []
    assert get_schedule("list-a").last_error is None
    q("update pgflow.schedules set input = '[3]' where schedule_name = 'object'")
    assert sorted(name for name, _, _ in fire(minute(2.5))) == ["list-a", "list-b", "object"]
    assert get_schedule("object").last_error is None and ledger("object") == [minute(2)]
