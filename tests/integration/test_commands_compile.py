"""``pgflow_compile``: compile, verify, --check (never writes), option updates, mismatches, exit codes."""

from __future__ import annotations

import json
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

import pgflow_django.flows.compiler
from pgflow_django import start_flow
from tests.integration.commands_flows import MODULE, REGISTERED
from tests.integration.commands_support import (
    call,
    drop_command_flows,
    flow_exists,
    manage_in_process,
    queue_exists,
    stderr_lines,
)
from tests.support.db import scalar


@pytest.fixture(autouse=True)
def command_flows(settings: Any) -> None:
    settings.PGFLOW = {"FLOWS": list(REGISTERED)}


def use(settings: Any, attribute: str) -> None:
    """Register another definition under ``cmd_greet`` (same slug, other options or shape)."""
    settings.PGFLOW = {"FLOWS": [f"{MODULE}.{attribute}"]}


def test_compiles_a_new_flow_then_verifies_it() -> None:
    out, _ = call("pgflow_compile", "cmd_greet")
    assert out.split() == ["compiled", "cmd_greet"]
    assert flow_exists("cmd_greet") and queue_exists("cmd_greet")

    out, _ = call("pgflow_compile", "cmd_greet")
    assert out.split() == ["verified", "cmd_greet"]


def test_without_arguments_compiles_every_registered_flow() -> None:
    out, _ = call("pgflow_compile", "--format", "json")
    statuses = {item["flow_slug"]: item["status"] for item in json.loads(out)}
    assert {statuses[slug] for slug in ("cmd_greet", "cmd_squares", "cmd_boom")} == {"compiled"}


def test_goes_through_compile_flow(monkeypatch: pytest.MonkeyPatch) -> None:
    """The worker's code path: the real function runs; the spy only records the calls."""
    seen: list[str] = []
    real = pgflow_django.flows.compiler.compile_flow

    def spy(flow: Any, **kwargs: Any) -> Any:
        seen.append(flow.slug)
        return real(flow, **kwargs)

    monkeypatch.setattr("pgflow_django.management.commands.pgflow_compile.compile_flow", spy)
    call("pgflow_compile", "cmd_greet", "cmd_boom")
    call("pgflow_compile", "cmd_greet", "--check")
    assert seen == ["cmd_greet", "cmd_boom", "cmd_greet"]


def test_check_never_creates_a_flow() -> None:
    with pytest.raises(CommandError, match=r"1 of 1 flows are not compiled yet \(cmd_greet\)") as info:
        call("pgflow_compile", "cmd_greet", "--check")
    assert info.value.returncode == 1
    assert not flow_exists("cmd_greet")
    assert not queue_exists("cmd_greet")


def test_check_verifies_a_compiled_flow() -> None:
    call("pgflow_compile", "cmd_greet")
    out, err = call("pgflow_compile", "cmd_greet", "--check")
    assert out.split() == ["verified", "cmd_greet"]
    assert err == ""


def test_changed_options_are_a_new_version_checked_first(settings: Any) -> None:
    call("pgflow_compile", "cmd_greet")
    use(settings, "greet_retimed")
    out, _ = call("pgflow_compile", "cmd_greet", "--check")
    assert out.split() == ["new", "version", "cmd_greet___v2"]
    assert scalar("select count(*) from pgflow.flows where flow_slug like 'cmd_greet%%'") == 1
    out, _ = call("pgflow_compile", "cmd_greet")
    assert out.split() == ["new", "version", "cmd_greet___v2"]
    assert scalar("select opt_timeout from pgflow.flows where flow_slug = 'cmd_greet___v2'") == 9
    assert scalar("select opt_timeout from pgflow.flows where flow_slug = 'cmd_greet'") == 5


def test_check_reports_changed_options_without_applying_them(settings: Any) -> None:
    call("pgflow_compile", "cmd_greet")
    use(settings, "greet_retimed")
    settings.PGFLOW = {**settings.PGFLOW, "ON_SHAPE_CHANGE": "refuse"}

    out, _ = call("pgflow_compile", "cmd_greet", "--check")
    assert "option differs from the database: flow timeout: 5 -> 9" in out
    assert scalar("select opt_timeout from pgflow.flows where flow_slug = 'cmd_greet'") == 5

    out, _ = call("pgflow_compile", "cmd_greet")
    assert "option updated: flow timeout: 5 -> 9" in out
    assert scalar("select opt_timeout from pgflow.flows where flow_slug = 'cmd_greet'") == 9


def test_a_changed_shape_is_a_mismatch_that_changes_nothing_under_refuse(settings: Any) -> None:
    call("pgflow_compile", "cmd_greet")
    start_flow("cmd_greet", {})
    use(settings, "greet_changed")
    settings.PGFLOW = {**settings.PGFLOW, "ON_SHAPE_CHANGE": "refuse"}
    err = StringIO()

    with pytest.raises(CommandError) as info:
        call_command("pgflow_compile", "cmd_greet", stdout=StringIO(), stderr=err)
    assert info.value.returncode == 1
    line = str(info.value)
    assert line.startswith(
        "flow 'cmd_greet' differs from its compiled definition in the database (shape differs: "
    )
    assert "add it as a new version" in line
    assert "manage.py pgflow_compile cmd_greet --replace (deletes 1 run (1 unfinished))" in line
    assert "mismatch" in err.getvalue()
    assert "  ~ step shout: step_type single -> map" in err.getvalue().splitlines()
    assert scalar(
        "select step_type from pgflow.steps where flow_slug = 'cmd_greet' and step_slug = 'shout'"
    ) == ("single")
    assert run_count() == 1


@pytest.mark.parametrize("debug", [True, False])
def test_debug_never_makes_a_changed_shape_replace(settings: Any, debug: bool) -> None:
    """The old default (PGFLOW['ALLOW_RECOMPILE'] followed DEBUG) deleted every run here."""
    call("pgflow_compile", "cmd_greet")
    start_flow("cmd_greet", {})
    settings.DEBUG = debug
    use(settings, "greet_changed")
    out, _ = call("pgflow_compile", "cmd_greet")
    assert out.split() == ["new", "version", "cmd_greet___v2"]
    assert run_count() == 1


def test_check_reports_a_mismatch(settings: Any) -> None:
    call("pgflow_compile", "cmd_greet")
    use(settings, "greet_changed")
    settings.PGFLOW = {**settings.PGFLOW, "ON_SHAPE_CHANGE": "refuse"}
    with pytest.raises(CommandError, match="differs from its compiled definition"):
        call("pgflow_compile", "cmd_greet", "--check")


class Terminal(StringIO):
    """What a person types at a terminal."""

    def isatty(self) -> bool:
        return True


def test_replace_with_yes_shows_the_cost_then_deletes_and_compiles_again(settings: Any) -> None:
    call("pgflow_compile", "cmd_greet")
    start_flow("cmd_greet", {})
    use(settings, "greet_changed")
    out, err = call("pgflow_compile", "cmd_greet", "--replace", "--yes")
    assert "replacing flow 'cmd_greet' deletes 1 run (1 unfinished), their tasks and its queue" in err
    assert "  ~ step shout: step_type single -> map" in err.splitlines()
    assert out.splitlines()[:2] == ["replaced     cmd_greet", "  deleted 1 run(s) (1 unfinished)"]
    assert scalar(
        "select step_type from pgflow.steps where flow_slug = 'cmd_greet' and step_slug = 'shout'"
    ) == ("map")
    assert run_count() == 0


def test_replace_without_a_terminal_or_yes_refuses_and_deletes_nothing(settings: Any) -> None:
    call("pgflow_compile", "cmd_greet")
    start_flow("cmd_greet", {})
    use(settings, "greet_changed")
    with pytest.raises(
        CommandError, match=r"refusing to replace flow 'cmd_greet' without confirmation: .* pass --yes"
    ):
        call("pgflow_compile", "cmd_greet", "--replace", stdin=StringIO("cmd_greet\n"))
    assert run_count() == 1


def test_replace_asks_at_a_terminal(settings: Any) -> None:
    call("pgflow_compile", "cmd_greet")
    start_flow("cmd_greet", {})
    use(settings, "greet_changed")
    with pytest.raises(CommandError, match="not confirmed; flow 'cmd_greet' was not replaced"):
        call("pgflow_compile", "cmd_greet", "--replace", stdin=Terminal("no\n"))
    assert run_count() == 1
    out, err = call("pgflow_compile", "cmd_greet", "--replace", stdin=Terminal("cmd_greet\n"))
    assert "deletes 1 run (1 unfinished)" in err and "Type the flow slug to confirm" in err
    assert out.split()[:2] == ["replaced", "cmd_greet"]
    assert run_count() == 0


def test_replace_leaves_an_unchanged_flow_alone() -> None:
    call("pgflow_compile", "cmd_greet")
    start_flow("cmd_greet", {})
    out, _ = call("pgflow_compile", "cmd_greet", "--replace", "--yes")
    assert out.split()[:2] == ["verified", "cmd_greet"]
    assert run_count() == 1


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--check", "--replace", "cmd_greet"], "cannot be combined with --replace"),
        (["--replace"], "name the flows to replace"),
        (["cmd_greet", "--yes"], "--yes confirms --replace"),
        (
            ["cmd_greet", "--allow-recompile"],
            "--allow-recompile was removed .* use manage.py pgflow_compile FLOW --replace",
        ),
    ],
)
def test_replace_arguments(args: list[str], message: str) -> None:
    with pytest.raises(CommandError, match=message):
        call("pgflow_compile", *args)
    assert not flow_exists("cmd_greet")


def run_count() -> int:
    return int(scalar("select count(*) from pgflow.runs where flow_slug = 'cmd_greet'"))


def test_unknown_flow_names_the_registered_ones() -> None:
    with pytest.raises(CommandError, match=r"no registered flow 'nope' .*cmd_greet"):
        call("pgflow_compile", "nope")


def test_no_registered_flows_is_not_an_error(settings: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    settings.PGFLOW = {"FLOWS": []}
    monkeypatch.setattr("pgflow_django.management.commands.pgflow_compile.get_flows", dict)
    out, err = call("pgflow_compile", "--format", "json")
    assert json.loads(out) == []
    assert "no flows registered" in err


def test_exit_codes(transactional_db: None) -> None:
    drop_command_flows()
    try:
        missing = manage_in_process("pgflow_compile", "cmd_greet", "--check")
        assert missing.returncode == 1
        assert stderr_lines(missing)[-1].startswith("CommandError: 1 of 1 flows are not compiled yet")
        assert "Traceback" not in missing.stderr

        compiled = manage_in_process("pgflow_compile", "cmd_greet", "cmd_boom")
        assert compiled.returncode == 0, compiled.stderr
        assert compiled.stdout.split() == ["compiled", "cmd_greet", "compiled", "cmd_boom"]

        checked = manage_in_process("pgflow_compile", "cmd_greet", "cmd_boom", "--check")
        assert checked.returncode == 0, checked.stderr
    finally:
        drop_command_flows()
