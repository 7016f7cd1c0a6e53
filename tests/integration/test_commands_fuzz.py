"""Every ``pgflow_*`` command's arguments, fuzzed in-process: numbers at the edges, foreign digits,
unicode and control characters. Whatever the arguments, a command exits 0, 1, 2 or 3, prints no
traceback, and writes nothing when it refuses its arguments (exit 2).

Commands are found by name, so a new ``pgflow_*`` command is fuzzed too. Each example runs in a
savepoint that is rolled back, so examples do not see each other's writes; the run is derandomized
and bounded (a few seconds per command) to keep the suite fast and repeatable.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from importlib import import_module
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import get_commands
from django.core.management.base import BaseCommand, CommandError
from django.db import connection, transaction
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pgflow_django import start_flow
from pgflow_django.flows.compiler import compile_flow
from tests.integration import commands_flows
from tests.integration.commands_support import manage_in_process
from tests.sql import support

COMMANDS = sorted(name for name in get_commands() if name.startswith("pgflow_"))
PARSER_ONLY = frozenset({"pgflow_worker", "pgflow_demo", "pgflow_scheduler"})
"""They run until a signal (or start processes): only their argument parsing is fuzzed."""
NEVER = {"pgflow_start": {"--wait"}, "pgflow_runs": {"--watch"}, "pgflow_metrics": {"--output"}}
"""Options that wait for something no test process provides (a worker, a Ctrl-C), or write a file."""
DJANGO_OPTIONS = frozenset(
    {
        "-h",
        "--help",
        "--version",
        "--settings",
        "--pythonpath",
        "--traceback",
        "--no-color",
        "--force-color",
        "--skip-checks",
    }
)
EXIT_CODES = {0, 1, 2, 3}
STDIN = '{"from": "stdin"}'
WRITES_SQL = """
select coalesce(sum(n_tup_ins + n_tup_upd + n_tup_del), 0)
  from pg_stat_xact_all_tables where schemaname in ('pgflow', 'pgmq')
"""
"""Rows this transaction inserted, updated or deleted in pgflow's and PGMQ's tables so far."""

EDGES = [
    "0",
    "1",
    "-1",
    "+1",
    "2147483647",
    "2147483648",
    "9223372036854775808",
    "99999999999999999999",
    "9" * 5000,
    "1e12",
    "1e400",
    "-0",
    "nan",
    "inf",
    "-inf",
    "0.0001",
    "1_000",
    "0x1f",
    "²",
    "١٢",
    "٣",
    "7d",
    "300000000w",
    "1h30m",
    "0s",
    "1" * 30 + "s",
    "00000000-0000-0000-0000-000000000000",
    "5f1c2d3e-aaaa-bbbb-cccc-0123456789ab",
    "cmd_greet",
    "cmd_boom",
    "cmd_squares",
    "Cmd_Greet",
    "default",
    "hello",
    "{}",
    "[]",
    "[1, 2]",
    '{"name": "ada"}',
    "-",
    "@/nonexistent/input.json",
    "{oops",
    "",
    " ",
    "\x1b[2J",
    "\x1b]8;;https://evil.example\x1b\\",
    "[/bold]",
    "[link=https://e.x]x",
    "a" * 300,
    "\u202e",
    "\udcff",
    "json",
    "text",
    "started",
    "failed",
]


def _values(files: list[str]) -> st.SearchStrategy[str]:
    text = st.text(st.characters(codec=None), max_size=24).filter(lambda value: not value.startswith("@"))
    return st.one_of(st.sampled_from(EDGES + files), text)


@st.composite
def _argv(
    draw: Any, parser: argparse.ArgumentParser, never: set[str], values: st.SearchStrategy[str]
) -> list[str]:
    argv: list[str] = []
    for action in parser._actions:
        if action.option_strings:
            if set(action.option_strings) & (DJANGO_OPTIONS | never) or not draw(st.booleans()):
                continue
            argv.append(draw(st.sampled_from(action.option_strings)))
            if action.nargs == 0:
                continue
        elif action.nargs in ("?", "*") and not draw(st.booleans()):
            continue
        choices = [str(choice) for choice in action.choices or ()]
        argv.append(draw(st.sampled_from(choices) | values if choices else values))
    if draw(st.integers(0, 5)) == 0:
        argv.append(draw(values))
    return draw(st.permutations(argv)) if draw(st.booleans()) else argv


def _command(name: str, out: StringIO, err: StringIO) -> BaseCommand:
    app = get_commands()[name]
    command: BaseCommand = import_module(f"{app}.management.commands.{name}").Command(stdout=out, stderr=err)
    return command


def _parse(name: str, argv: list[str]) -> int:
    command = _command(name, StringIO(), StringIO())
    try:
        command.create_parser("manage.py", name).parse_args(argv)
    except CommandError:
        return 2
    return 0


def _writes() -> int:
    with connection.cursor() as cursor:
        cursor.execute(WRITES_SQL)
        return int(cursor.fetchone()[0])


@pytest.fixture
def state(tmp_path: Path, settings: Any) -> Iterator[list[str]]:
    """Compiled flows with a run in each state, and input files that cannot be read back."""
    settings.PGFLOW = {"FLOWS": list(commands_flows.REGISTERED)}
    for flow in (commands_flows.greet, commands_flows.squares, commands_flows.boom):
        compile_flow(flow)
    start_flow("cmd_greet", {"name": "ada"})
    start_flow("cmd_boom", {})
    assert support.fail(support.claim_one("cmd_boom"), "boom [/bold] \x1b[2J") == "failed"
    files = []
    for name, content in (("digits", "9" * 5000), ("deep", "[" * 50_000 + "]" * 50_000), ("bad", "\xff{")):
        path = tmp_path / f"{name}.json"
        path.write_text(content, encoding="latin-1")
        files.append(f"@{path}")
    yield files


def test_every_pgflow_command_is_fuzzed() -> None:
    assert {"pgflow_runs", "pgflow_start", "pgflow_prune", "pgflow_coverage", "pgflow_worker"} <= set(
        COMMANDS
    )


@pytest.mark.parametrize("name", COMMANDS)
def test_arguments_fuzz(name: str, state: list[str]) -> None:
    parser = _command(name, StringIO(), StringIO()).create_parser("manage.py", name)

    @settings(
        max_examples=40 if name in PARSER_ONLY else 30,
        derandomize=True,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(argv=_argv(parser, NEVER.get(name, set()), _values(state)))
    def fuzz(argv: list[str]) -> None:
        if name in PARSER_ONLY:
            assert _parse(name, argv) in (0, 2)
            return
        with transaction.atomic():
            before = _writes()
            result = manage_in_process(name, *argv, stdin=STDIN)
            code, out, err = result.returncode, result.stdout, result.stderr
            assert code in EXIT_CODES, (argv, code, out, err)
            assert "Traceback" not in err and "Traceback" not in out, (argv, err)
            if code == 2:
                assert _writes() == before, f"{name} {argv} refused its arguments but wrote"
                assert len([line for line in err.splitlines() if line.strip()]) == 1, (argv, err)
            for stream in (out, err):
                assert "\x1b]" not in stream and "\x9b" not in stream, (argv, stream)
            transaction.set_rollback(True)

    fuzz()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["pgflow_prune", "--older-than", "300000000w"], "duration '300000000w' is too long"),
        (["pgflow_prune", "--older-than", "9" * 5000 + "s"], "is too long: at most 36500d"),
        (["pgflow_runs", "--limit", "99999999999999999999"], "expected a whole number from 1 to 2147483647"),
        (["pgflow_runs", "--limit", "²"], "expected a whole number >= 1, got '²'"),
        (["pgflow_coverage", "--live-seconds", "1e12"], "expected a number of seconds > 0 (at most"),
        (["pgflow_runs", "--flow", "nope"], "--flow: no flow 'nope' (known flows: "),
        (["pgflow_runs", "--flow", "cmd_gret"], "did you mean 'cmd_greet'?"),
    ],
)
def test_reported_edges_are_one_line_and_exit_2(argv: list[str], message: str, state: list[str]) -> None:
    before = _writes()
    result = manage_in_process(*argv)
    code, out, err = result.returncode, result.stdout, result.stderr
    assert code == 2, (out, err)
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and message in lines[0], err
    assert "Traceback" not in err and out == ""
    assert _writes() == before


@pytest.mark.parametrize("name", ["digits", "deep"])
def test_unreadable_input_files_are_one_line_and_exit_2(name: str, state: list[str]) -> None:
    path = next(file for file in state if file.endswith(f"{name}.json"))
    before = _writes()
    result = manage_in_process("pgflow_start", "cmd_greet", "--input", path)
    code, out, err = result.returncode, result.stdout, result.stderr
    assert code == 2, (out, err)
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert _writes() == before


def test_the_write_counter_sees_what_a_command_writes(state: list[str]) -> None:
    """The "nothing written" checks above would pass vacuously if the counter missed writes."""
    before = _writes()
    result = manage_in_process("pgflow_start", "cmd_greet", "--input", "{}")
    assert result.returncode == 0, result.stderr
    assert _writes() > before
