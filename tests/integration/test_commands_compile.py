"""``pgflow_compile``: compile, verify, --check (never writes), option updates, mismatches, exit codes."""

from __future__ import annotations

import json
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

import pgflow_django.compiler
from tests.integration.commands_flows import MODULE, REGISTERED
from tests.integration.commands_support import (
    call,
    drop_command_flows,
    flow_exists,
    manage,
    queue_exists,
    scalar,
    stderr_lines,
)


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
    real = pgflow_django.compiler.compile_flow

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


def test_check_reports_changed_options_without_applying_them(settings: Any) -> None:
    call("pgflow_compile", "cmd_greet")
    use(settings, "greet_retimed")

    out, _ = call("pgflow_compile", "cmd_greet", "--check")
    assert "option differs from the database: flow timeout: 5 -> 9" in out
    assert scalar("select opt_timeout from pgflow.flows where flow_slug = 'cmd_greet'") == 5

    out, _ = call("pgflow_compile", "cmd_greet")
    assert "option updated: flow timeout: 5 -> 9" in out
    assert scalar("select opt_timeout from pgflow.flows where flow_slug = 'cmd_greet'") == 9


def test_a_changed_shape_is_a_mismatch_that_changes_nothing(settings: Any) -> None:
    call("pgflow_compile", "cmd_greet")
    use(settings, "greet_changed")
    err = StringIO()

    with pytest.raises(CommandError, match="1 of 1 flows differ from the database \\(cmd_greet\\)") as info:
        call_command("pgflow_compile", "cmd_greet", "--no-allow-recompile", stdout=StringIO(), stderr=err)
    assert info.value.returncode == 1
    assert "mismatch" in err.getvalue()
    assert 'step 1 (shout): step_type is "map" in the definition, "single" in the database' in err.getvalue()
    assert scalar(
        "select step_type from pgflow.steps where flow_slug = 'cmd_greet' and step_slug = 'shout'"
    ) == ("single")


def test_check_reports_a_mismatch(settings: Any) -> None:
    call("pgflow_compile", "cmd_greet")
    use(settings, "greet_changed")
    with pytest.raises(CommandError, match="differ from the database"):
        call("pgflow_compile", "cmd_greet", "--check")


def test_allow_recompile_deletes_and_compiles_again(settings: Any) -> None:
    call("pgflow_compile", "cmd_greet")
    use(settings, "greet_changed")
    out, _ = call("pgflow_compile", "cmd_greet", "--allow-recompile")
    assert out.split()[:2] == ["recompiled", "cmd_greet"]
    assert scalar(
        "select step_type from pgflow.steps where flow_slug = 'cmd_greet' and step_slug = 'shout'"
    ) == ("map")


def test_check_cannot_be_combined_with_allow_recompile() -> None:
    with pytest.raises(CommandError, match="cannot be combined with --allow-recompile"):
        call("pgflow_compile", "--check", "--allow-recompile")


def test_unknown_flow_names_the_registered_ones() -> None:
    with pytest.raises(CommandError, match=r"no registered flow 'nope' .*cmd_greet"):
        call("pgflow_compile", "nope")


def test_no_registered_flows_is_not_an_error(settings: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    settings.PGFLOW = {"FLOWS": []}
    monkeypatch.setattr("pgflow_django.management.commands.pgflow_compile.get_flows", dict)
    out, err = call("pgflow_compile", "--format", "json")
    assert json.loads(out) == []
    assert "no flows registered" in err


def test_exit_codes_as_a_subprocess(database_url: str) -> None:
    drop_command_flows()
    try:
        missing = manage(database_url, "pgflow_compile", "cmd_greet", "--check")
        assert missing.returncode == 1
        assert stderr_lines(missing)[-1].startswith("CommandError: 1 of 1 flows are not compiled yet")
        assert "Traceback" not in missing.stderr

        compiled = manage(database_url, "pgflow_compile", "cmd_greet", "cmd_boom")
        assert compiled.returncode == 0, compiled.stderr
        assert compiled.stdout.split() == ["compiled", "cmd_greet", "compiled", "cmd_boom"]

        checked = manage(database_url, "pgflow_compile", "cmd_greet", "cmd_boom", "--check")
        assert checked.returncode == 0, checked.stderr
    finally:
        drop_command_flows()
