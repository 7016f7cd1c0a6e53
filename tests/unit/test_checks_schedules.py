"""System checks on declared schedules (issue 17 item 5): an invalid cron, a flow that is not
registered, one name declared twice; each shown firing and not firing (no database)."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator

import pytest
from django.core.checks import CheckMessage, Error, run_checks
from django.test import override_settings

from pgflow_django.schedules.declare import declared_schedules, forget_declarations

MODULE = "tests.unit.checks_schedules"
NAMES = ("checks-ok", "checks-orphan", "checks-bad-cron", "checks-twice")


@pytest.fixture(autouse=True)
def fresh_declarations() -> Iterator[None]:
    """Each test imports the declaring modules anew, and leaves no declaration behind."""
    forget_declarations(*NAMES)
    for name in [m for m in sys.modules if m.startswith("tests.unit.checks_schedules")]:
        del sys.modules[name]
    yield
    forget_declarations(*NAMES)
    for name in [m for m in sys.modules if m.startswith("tests.unit.checks_schedules")]:
        del sys.modules[name]


def messages(*paths: str) -> list[CheckMessage]:
    with override_settings(PGFLOW={"FLOWS": list(paths)}):
        return [m for m in run_checks(tags=["pgflow"], databases=[]) if m.id.startswith("pgflow.")]


def test_registered_schedules_pass() -> None:
    assert [m.id for m in messages(f"{MODULE}.scheduled", f"{MODULE}.orphan")] == []
    assert {"checks-ok", "checks-orphan"} <= {spec.name for spec in declared_schedules()}


def test_a_schedule_of_a_flow_not_registered() -> None:
    (found,) = messages(f"{MODULE}.scheduled")
    assert (found.id, found.obj) == ("pgflow.E031", "checks-orphan")
    assert isinstance(found, Error)
    assert "starts flow 'checks_orphan', which is not registered" in found.msg
    assert found.hint is not None and "PGFLOW['FLOWS']" in found.hint


def test_an_invalid_cron_is_one_finding_not_the_flows_e001() -> None:
    found = messages(f"{MODULE}.scheduled", f"{MODULE}.orphan", "tests.unit.checks_schedules_bad_cron")
    assert [m.id for m in found] == ["pgflow.E030"]
    assert found[0].msg == (
        "a declared schedule in module tests.unit.checks_schedules_bad_cron, line 7 is invalid: "
        "cron '61 * * * *' is not valid: Bad minute"
    )


def test_one_name_declared_twice() -> None:
    importlib.import_module(MODULE)
    found = messages(f"{MODULE}.scheduled", f"{MODULE}.orphan", "tests.unit.checks_schedules_twice")
    assert [m.id for m in found] == ["pgflow.E030"]
    assert "'checks-twice' is declared twice with different definitions" in found[0].msg
    assert "give one of them another name=" in found[0].msg
