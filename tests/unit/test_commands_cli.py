"""Argument types and error descriptions shared by the ``pgflow_*`` commands (no database)."""

from __future__ import annotations

import argparse
import json
import uuid
from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from django.core.management import get_commands, load_command_class
from django.db import OperationalError as DjangoOperationalError
from django.db import ProgrammingError

from pgflow_django.management.cli import (
    describe_database_error,
    parse_duration,
    positive_float,
    positive_int,
    run_id,
    to_json,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("7d", timedelta(days=7)),
        ("12h", timedelta(hours=12)),
        ("30m", timedelta(minutes=30)),
        ("3600s", timedelta(seconds=3600)),
        ("2w", timedelta(weeks=2)),
        ("1h30m", timedelta(hours=1, minutes=30)),
        ("1D 12H", timedelta(days=1, hours=12)),
        ("0s", timedelta(0)),
    ],
)
def test_durations(text: str, expected: timedelta) -> None:
    assert parse_duration(text) == expected


@pytest.mark.parametrize("text", ["", "7", "7x", "d", "-1d", "1.5h", "7d later"])
def test_invalid_durations_say_what_is_accepted(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=r"use whole numbers with a unit s, m, h, d or w"):
        parse_duration(text)


def test_numbers_and_ids() -> None:
    assert positive_int("3") == 3
    assert positive_float("0.5") == 0.5
    assert run_id("8f14e45f-ceea-467f-a0e6-4b8b1c1e5a3e") == uuid.UUID("8f14e45f-ceea-467f-a0e6-4b8b1c1e5a3e")
    for bad in ("0", "-2", "x"):
        with pytest.raises(argparse.ArgumentTypeError, match="whole number >= 1"):
            positive_int(bad)
    for bad in ("0", "nan", "inf", "x"):
        with pytest.raises(argparse.ArgumentTypeError, match="seconds > 0"):
            positive_float(bad)
    with pytest.raises(argparse.ArgumentTypeError, match="not a UUID"):
        run_id("42")


def test_json_output_turns_ids_and_times_into_strings() -> None:
    key = uuid.uuid4()
    moment = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    assert json.loads(to_json({"id": key, "at": moment, "took": timedelta(seconds=1.5)})) == {
        "id": str(key),
        "at": "2026-01-02T03:04:05+00:00",
        "took": 1.5,
    }


def _wrapped(cause: psycopg.Error, wrapper: type[Exception] = ProgrammingError) -> Exception:
    """What Django raises: its own exception class, with psycopg's error as the cause."""
    try:
        raise wrapper(str(cause)) from cause
    except Exception as exc:
        return exc


def test_missing_pgflow_objects_mean_migrate() -> None:
    error = psycopg.errors.UndefinedFunction("function pgflow.start_flows(unknown) does not exist\nHINT: ...")
    message = describe_database_error(_wrapped(error))
    assert message == (
        "the database is not migrated for pgflow (function pgflow.start_flows(unknown) does not exist); "
        "run `manage.py migrate`"
    )


def test_raised_sql_api_errors_are_shown_as_they_are() -> None:
    error = psycopg.errors.RaiseException("flow 'x' does not exist: compile it first\nCONTEXT: PL/pgSQL")
    assert describe_database_error(_wrapped(error)) == "flow 'x' does not exist: compile it first"


def test_connection_failures_are_one_line() -> None:
    error = psycopg.OperationalError(
        'connection failed: connection to server at "127.0.0.1", port 1 failed: Connection refused\n'
        "\tIs the server running on that host and accepting TCP/IP connections?"
    )
    message = describe_database_error(_wrapped(error, DjangoOperationalError))
    assert message.startswith("cannot connect to the database: connection failed")
    assert "\n" not in message


PGFLOW_COMMANDS = sorted(name for name in get_commands() if name.startswith("pgflow_"))


def test_every_pgflow_command_is_checked() -> None:
    assert {"pgflow_worker", "pgflow_coverage", "pgflow_demo"} <= set(PGFLOW_COMMANDS)


@pytest.mark.parametrize("name", PGFLOW_COMMANDS)
def test_help_fits_80_columns(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Examples keep their lines (they are not filled), so each must fit by itself."""
    monkeypatch.setenv("COLUMNS", "80")
    command = load_command_class(get_commands()[name], name)
    text = command.create_parser("manage.py", name).format_help()
    assert "examples:" in text
    assert [line for line in text.splitlines() if len(line) > 80] == []
