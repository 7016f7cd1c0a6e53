"""Hostile identifiers (tests/hostile.py) through the DSL and every management command argument
(issue 8, item 3): each is refused with one clear line and a non-zero exit, and nothing changes in the
database (no ``public.pwned``, no flow, run, pause or queue)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.core.management.base import CommandError
from django.db import connection, transaction

from pgflow_django import Flow
from pgflow_django.flows.dsl import FlowDefinitionError
from pgflow_django.flows.slugs import InvalidSlug
from tests.hostile import HOSTILE, ids, pwned_exists
from tests.integration.commands_support import call, manage, manage_in_process, stderr_lines
from tests.sql.support import pgmq_relations, table_counts

REFUSED = (InvalidSlug, FlowDefinitionError)


def _one_line(message: str) -> None:
    assert message.strip(), "an empty error message"
    assert "\n" not in message.strip(), f"not one line: {message!r}"


def _nothing_changed() -> Callable[[], None]:
    before = (table_counts(), pgmq_relations())

    def check() -> None:
        with connection.cursor() as cursor:
            assert not pwned_exists(cursor)
        assert (table_counts(), pgmq_relations()) == before

    return check


# ------------------------------------------------------------------ DSL


def _handler(value: Any) -> Any:
    return value


@pytest.mark.parametrize("name", HOSTILE, ids=ids())
def test_flow_slug_is_refused_at_definition(name: str) -> None:
    with pytest.raises(REFUSED) as info:
        Flow(name)
    _one_line(str(info.value))
    assert "flow slug" in str(info.value)


@pytest.mark.parametrize("name", HOSTILE, ids=ids())
@pytest.mark.parametrize("kind", ["step", "map", "depends_on"])
def test_step_slug_is_refused_at_definition(name: str, kind: str) -> None:
    flow = Flow("rel_dsl_probe")
    flow.step(slug="first")(_handler)
    with pytest.raises(REFUSED) as info:
        if kind == "step":
            flow.step(slug=name)(_handler)
        elif kind == "map":
            flow.map(slug=name)(_handler)
        else:
            flow.step(slug="second", depends_on=[name])(lambda deps: deps)
    _one_line(str(info.value))
    assert list(flow.steps) == ["first"], "a refused step is not added"


# ------------------------------------------------------------------ commands, in-process


def _command_args(name: str) -> list[tuple[str, list[str]]]:
    """Every pgflow command argument that takes an identifier (or a value that reaches SQL)."""
    return [
        ("pgflow_worker", ["pgflow_worker", "--flow", name]),
        ("pgflow_start", ["pgflow_start", name, "--input", "{}"]),
        ("pgflow_start --run-id", ["pgflow_start", "example_chain", "--input", "{}", "--run-id", name]),
        ("pgflow_runs RUN_ID", ["pgflow_runs", name]),
        ("pgflow_delete_flow", ["pgflow_delete_flow", name, "--yes"]),
        ("pgflow_prune", ["pgflow_prune", "--older-than", f"7d{name}"]),
        ("pgflow_pause", ["pgflow_pause", name]),
        ("pgflow_compile", ["pgflow_compile", name]),
        ("pgflow_requeue_stalled --format", ["pgflow_requeue_stalled", "--format", name]),
        ("pgflow_audit --format", ["pgflow_audit", "--format", name]),
    ]


COMMANDS = [label for label, _ in _command_args("x")]


@pytest.mark.parametrize("command", COMMANDS)
def test_command_arguments_refuse_hostile_identifiers(command: str) -> None:
    check = _nothing_changed()
    accepted = []
    for name in HOSTILE:
        if name == "" and command == "pgflow_prune":
            continue  # '7d' is a valid duration
        args = dict(_command_args(name))[command]
        try:
            # a savepoint: the test shares one transaction, where a command's process has autocommit
            with transaction.atomic():
                out, err = call(*args)
        except CommandError as exc:
            _one_line(str(exc))
            assert getattr(exc, "returncode", 1) != 0
        else:
            accepted.append(f"{name!r}: {out.strip()!r} {err.strip()!r}")
        with connection.cursor() as cursor:
            assert not pwned_exists(cursor), f"{command} {name!r} created public.pwned"
    assert not accepted, f"{command} accepted hostile input:\n" + "\n".join(accepted)
    check()


def test_runs_flow_filter_refuses_an_invalid_slug() -> None:
    check = _nothing_changed()
    with pytest.raises(CommandError):
        call("pgflow_runs", "--flow", HOSTILE[0])
    check()


def test_resume_refuses_an_invalid_slug() -> None:
    check = _nothing_changed()
    with pytest.raises(CommandError):
        call("pgflow_resume", HOSTILE[0])
    check()


def test_runs_flow_filter_and_resume_have_no_side_effect() -> None:
    """Whatever they answer, the two lenient commands never touch the database."""
    check = _nothing_changed()
    for name in HOSTILE:
        for args in (["pgflow_runs", "--flow", name], ["pgflow_resume", name]):
            try:
                with transaction.atomic():
                    call(*args)
            except CommandError as exc:
                _one_line(str(exc))
    check()


# ------------------------------------------------------------------ commands, as manage.py runs them


@pytest.mark.django_db(transaction=True)
def test_commands_exit_non_zero_with_one_line(database_url: str) -> None:
    """The ``manage.py`` contract for the classic injection: each command in this process, the worker
    as a real one (it configures the process's logging, and runs on if its refusal is lost)."""
    name = HOSTILE[0]
    commands = _command_args(name)
    results = [
        manage(database_url, *args) if label == "pgflow_worker" else manage_in_process(*args)
        for label, args in commands
    ]
    for (label, _), result in zip(commands, results, strict=True):
        assert result.returncode in (1, 2), f"{label}: exit {result.returncode}\n{result.stderr}"
        lines = stderr_lines(result)
        assert len(lines) == 1, f"{label}: {result.stderr}"
        assert "Traceback" not in result.stderr
    with connection.cursor() as cursor:
        assert not pwned_exists(cursor)
        cursor.execute("select count(*) from pgflow.flows where not pgflow.is_valid_slug(flow_slug)")
        assert cursor.fetchone()[0] == 0
