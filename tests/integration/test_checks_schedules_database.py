"""The schedules' database checks (``manage.py check --database default``): a stored cron that no
longer parses, a declared name taken by a runtime schedule, an active schedule of a flow that is not
compiled, a planning failure another host recorded; each shown firing and not. Every change is
rolled back with the test's transaction."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from django.core.checks import CheckMessage, run_checks
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.db import connection

from pgflow_django.flows.compiler import compile_flow
from pgflow_django.schedules import create_schedule, edit_schedule, pause_schedule, schedule
from pgflow_django.schedules.declare import forget_declarations
from pgflow_django.schedules.planner import plan_schedules
from tests.integration import commands_flows
from tests.sql import support


def found() -> list[tuple[str, object]]:
    messages: list[CheckMessage] = run_checks(tags=["database"], databases=["default"])
    return [(m.id, m.obj) for m in messages if m.id.startswith("pgflow.") and m.id != "pgflow.I001"]


@pytest.fixture(autouse=True)
def greet() -> Iterator[None]:
    """cmd_greet compiled, with a live worker for both its steps (so no pgflow.W031, whose own tests
    are in test_no_live_worker.py)."""
    compile_flow(commands_flows.greet)
    worker_id = uuid.uuid4()
    support.q(
        "insert into pgflow.workers (worker_id, queue_name, function_name) values (%s, 'cmd_greet', 'tests')",
        [worker_id],
    )
    support.q(
        "insert into pgflow.worker_support (worker_id, flow_slug, step_slug) "
        "values (%s, 'cmd_greet', 'hello'), (%s, 'cmd_greet', 'shout')",
        [worker_id, worker_id],
    )
    yield
    forget_declarations("chk-declared")


def test_valid_schedules_pass() -> None:
    create_schedule("cmd_greet", cron="*/5 * * * *", name="chk-ok")
    assert found() == []
    call_command("check", "--database", "default", "--fail-level", "WARNING")


def test_a_stored_cron_that_no_longer_parses() -> None:
    create_schedule("cmd_greet", cron="0 * * * *", name="chk-cron")
    support.q("update pgflow.schedules set cron = '0 25 * * *' where schedule_name = 'chk-cron'")
    assert found() == [("pgflow.E032", "chk-cron")]
    support.q(
        "update pgflow.schedules set cron = '0 * * * *', timezone = 'Mars/Olympus' "
        "where schedule_name = 'chk-cron'"
    )
    assert found() == [("pgflow.E032", "chk-cron")]
    with pytest.raises(SystemCheckError, match="'Mars/Olympus' is not a known IANA time zone"):
        call_command("check", "--database", "default")


def test_a_stored_localtime_zone_is_reported_and_still_planned() -> None:
    """A schedule stored with 'localtime' before it was refused keeps firing (planning reads it) and
    is reported until it is given a real zone."""
    create_schedule("cmd_greet", cron="0 * * * *", name="chk-local")
    support.q(
        "update pgflow.schedules set timezone = 'localtime', upcoming = '{}', next_fire_at = null "
        "where schedule_name = 'chk-local'"
    )
    with connection.cursor() as cursor:
        assert plan_schedules(cursor, names=["chk-local"]) == ["chk-local"]
    assert found() == [("pgflow.E032", "chk-local")]
    with pytest.raises(SystemCheckError, match="until then it fires on the zone of whichever host plans it"):
        call_command("check", "--database", "default")
    assert len(edit_schedule("chk-local", timezone="UTC").upcoming) == 100


def test_a_declared_name_taken_by_a_runtime_schedule() -> None:
    create_schedule("cmd_greet", cron="0 * * * *", name="chk-declared")
    assert found() == []
    schedule(commands_flows.greet, cron="0 * * * *", name="chk-declared")
    assert found() == [("pgflow.E033", "chk-declared")]


def test_an_active_schedule_of_a_flow_not_compiled() -> None:
    create_schedule("chk_not_compiled", cron="0 * * * *", name="chk-flow")
    assert found() == [("pgflow.W030", "chk-flow")]
    pause_schedule("chk-flow")
    assert found() == [], "a paused schedule fires nothing: no warning"


def test_a_planning_failure_recorded_by_another_host() -> None:
    """Planning failed on a host whose zoneinfo lacks the zone: this host can plan it, so E032 says
    nothing, and E035 reports what the scheduler recorded until a plan works and clears it."""
    create_schedule("cmd_greet", cron="0 * * * *", name="chk-planned", timezone="America/Nuuk")
    support.q(
        "update pgflow.schedules set upcoming = '{}', next_fire_at = null, plan_failed_at = now(),"
        " plan_error = 'timezone ''America/Nuuk'' is not a known IANA time zone; use a name such as ''UTC'''"
        " where schedule_name = 'chk-planned'"
    )
    assert found() == [("pgflow.E035", "chk-planned")]
    with pytest.raises(SystemCheckError, match=r"could not be planned at .*'America/Nuuk' is not a known"):
        call_command("check", "--database", "default")
    with connection.cursor() as cursor:
        assert plan_schedules(cursor, names=["chk-planned"]) == ["chk-planned"]
    assert found() == []


def test_a_planning_failure_that_fails_here_too_is_reported_once() -> None:
    create_schedule("cmd_greet", cron="0 * * * *", name="chk-both")
    support.q(
        "update pgflow.schedules set cron = '0 25 * * *', upcoming = '{}', next_fire_at = null"
        " where schedule_name = 'chk-both'"
    )
    with connection.cursor() as cursor:
        assert plan_schedules(cursor, names=["chk-both"]) == []
    assert support.val("select plan_error from pgflow.schedules where schedule_name = 'chk-both'")
    assert found() == [("pgflow.E032", "chk-both")]
