"""Catch-up after an outage longer than the plan (issue 35, item 2): a per-minute schedule planned at
12:00 holds 100 ticks (to 13:40); every worker is down for 3 hours. A plan whose ticks are all in the
past is planned again from now before anything fires, so the policy is applied to the ticks due by
now, not to the stale end of the old plan. Time is passed as ``now``."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from pgflow_django.schedules import get_schedule
from tests.sql.schedules.support import every_minute, fire, ledger, minute, plan, probe_flow, runs_of

pytestmark = pytest.mark.django_db

BACK = minute(180.5)
"""The first scheduler pass after the outage: 30 s after the 180th tick, 80 minutes after the plan's end."""
GRACE = timedelta(seconds=10)
"""A ``catch_up="none"`` grace shorter than the 30 s the latest tick is late by."""


@pytest.fixture(autouse=True)
def flow() -> str:
    return probe_flow()


def scheduler_pass(now: datetime) -> list[datetime]:
    """What a worker's pass does: plan the schedules that need it, then fire the due ticks."""
    plan(now)
    return [tick for _, tick, _ in fire(now, grace=GRACE)]


@pytest.mark.parametrize(
    ("policy", "max_catch_up", "fired", "missed"),
    [
        ("latest", 10, [180], 100),
        ("all", 5, [176, 177, 178, 179, 180], 100),
        ("none", 10, [], 101),
    ],
)
def test_four_passes_after_a_three_hour_outage_fire_what_the_policy_allows(
    policy: str, max_catch_up: int, fired: list[int], missed: int
) -> None:
    every_minute("s", catch_up=policy, max_catch_up=max_catch_up)
    assert get_schedule("s").upcoming[-1] == minute(100)
    ticks = [tick for second in range(4) for tick in scheduler_pass(BACK + timedelta(seconds=second))]
    assert ticks == [minute(n) for n in fired]
    assert ledger("s") == ticks and runs_of() == len(fired)
    # the 100 planned ticks of the old plan (and the newest ticks the policy let go) count as missed
    view = get_schedule("s")
    assert view.missed_ticks == missed
    assert view.upcoming[0] == minute(181) and len(view.upcoming) == 100
    # afterwards the schedule is back on time
    assert scheduler_pass(minute(181)) == [minute(181)]


def test_all_fires_the_latest_ticks_across_the_old_plan_s_end() -> None:
    """A gap of 2 ticks past the plan's end: ``all`` fires the 5 latest due ticks, 3 of them planned
    before the outage and 2 after it."""
    every_minute("s", catch_up="all", max_catch_up=5)
    assert scheduler_pass(minute(102.5)) == [minute(n) for n in range(98, 103)]
    assert get_schedule("s").missed_ticks == 97


def test_a_stale_plan_fires_nothing_until_it_is_planned_again() -> None:
    """A caller that only fires (pg_cron's job) leaves a plan whose ticks are all in the past alone:
    nothing fires or is consumed until a Python scheduler plans it from now."""
    every_minute("s", catch_up="latest")
    assert fire(BACK) == []
    view = get_schedule("s")
    assert len(view.upcoming) == 100 and view.missed_ticks == 0 and ledger("s") == []
    assert scheduler_pass(BACK) == [minute(180)]


def test_a_plan_that_still_reaches_now_fires_without_planning_again() -> None:
    """An outage shorter than the plan: the planned ticks hold every due tick, firing alone applies
    the policy (the last planned tick is still ahead)."""
    every_minute("s", catch_up="latest")
    assert [tick for _, tick, _ in fire(minute(99.5))] == [minute(99)]
    assert get_schedule("s").missed_ticks == 98
