"""Plumbing shared by the ``pgflow_*`` commands: one-line errors, JSON output, argument types, consoles.

Every command derives from ``PgflowCommand`` so that an operator (or a deploy script) always gets the
same contract: ``--help`` with examples, one line on stderr for any mistake, and documented exit codes
(0 success, 1 failure, 2 bad arguments).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import uuid
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from datetime import date, datetime, timedelta
from decimal import Decimal
from typing import Any, ClassVar, Final, TextIO

import psycopg
from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError, CommandParser, DjangoHelpFormatter
from django.db import Error as DjangoDatabaseError
from rich.console import Console

from pgflow_django.client import InvalidInput, RunNotFound
from pgflow_django.dbguard import require_postgresql
from pgflow_django.dsl import FlowDefinitionError
from pgflow_django.operations import FlowNotFound
from pgflow_django.registry import FlowNotRegistered
from pgflow_django.slugs import InvalidSlug

USAGE_ERROR: Final = 2
"""Exit code for bad arguments, as argparse uses."""

_DURATION_PART: Final = re.compile(r"(\d+)\s*([smhdw])")
_DURATION_UNITS: Final = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_UNDEFINED_OBJECT_STATES: Final = frozenset({"42883", "42P01", "3F000", "42704"})
"""undefined_function, undefined_table, invalid_schema_name, undefined_object: not migrated (far enough)."""
_USER_ERROR_STATES: Final = frozenset({"P0001", "22023", "22P02"})
"""Errors the SQL API raises on purpose, whose message already says what to do."""

_EXPECTED_ERRORS: Final = (
    ImproperlyConfigured,
    FlowNotRegistered,
    FlowDefinitionError,
    FlowNotFound,
    InvalidSlug,
    InvalidInput,
    RunNotFound,
)
"""Configuration and input mistakes whose message is already the one line to show."""


class HelpFormatter(DjangoHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Django's option order, but the description and examples keep their line breaks."""


class PgflowCommand(BaseCommand):
    """A command whose every failure is one clear line on stderr and a non-zero exit code."""

    examples: ClassVar[str] = ""
    """Shown under ``--help`` after the options."""

    requires_system_checks = []
    """No system checks first: each command checks what it needs and says it in one line, and an
    unrelated finding (another flow's bad slug) must not stop ``pgflow_runs`` or ``pgflow_pause``.
    ``manage.py check`` runs them (pgflow_django.checks)."""

    def create_parser(self, prog_name: str, subcommand: str, **kwargs: Any) -> CommandParser:
        kwargs.setdefault("formatter_class", HelpFormatter)
        if self.examples:
            kwargs.setdefault("epilog", f"examples:\n{self.examples.strip(chr(10)).rstrip()}")
        return super().create_parser(prog_name, subcommand, **kwargs)

    def run_from_argv(self, argv: list[str]) -> None:
        """Parse once up front so that a bad argument is one line and exit 2, not usage text."""
        parser = self.create_parser(argv[0], argv[1])
        try:
            parser.parse_args(argv[2:])
        except CommandError as exc:
            message = str(exc).removeprefix("Error: ")
            self.stderr.write(f"{parser.prog}: error: {message} (see --help)")
            sys.exit(USAGE_ERROR)
        super().run_from_argv(argv)

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            require_postgresql()
            self.run(*args, **options)
        except _EXPECTED_ERRORS as exc:
            raise CommandError(one_line(exc)) from exc
        except DjangoDatabaseError as exc:
            raise CommandError(describe_database_error(exc)) from exc
        except psycopg.Error as exc:
            raise CommandError(describe_database_error(exc)) from exc

    def run(self, *args: Any, **options: Any) -> None:
        raise NotImplementedError

    def console(self, *, stderr: bool = False, no_color: bool = False) -> Console:
        return make_console(self.stderr if stderr else self.stdout, no_color=no_color)

    def working(self, message: str, *, no_color: bool = False) -> AbstractContextManager[object]:
        """A spinner on stderr while one long statement runs; nothing when stderr is not a terminal."""
        console = self.console(stderr=True, no_color=no_color)
        return console.status(message) if console.is_terminal else nullcontext()

    def write_json(self, value: Any) -> None:
        self.stdout.write(to_json(value))


def make_console(stream: Any, *, no_color: bool = False) -> Console:
    """A rich console on the stream under Django's ``OutputWrapper`` (which would add newlines)."""
    out: TextIO = getattr(stream, "_out", stream)
    is_tty = bool(getattr(out, "isatty", lambda: False)())
    return Console(file=out, no_color=no_color, highlight=False, width=None if is_tty else 160)


def one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def describe_database_error(exc: BaseException) -> str:
    """One line that says what went wrong with the database and, where known, what to do."""
    cause: BaseException = exc
    while not isinstance(cause, psycopg.Error) and isinstance(cause.__cause__, BaseException):
        cause = cause.__cause__
    lines = [line.strip() for line in str(cause).strip().splitlines() if line.strip()]
    first = lines[0] if lines else type(cause).__name__
    sqlstate = getattr(cause, "sqlstate", None)
    if sqlstate in _UNDEFINED_OBJECT_STATES:
        return f"the database is not migrated for pgflow ({first}); run `manage.py migrate`"
    if sqlstate == "23505":
        detail = getattr(getattr(cause, "diag", None), "message_detail", None)
        return f"{first}: {detail}" if detail else first
    if sqlstate in _USER_ERROR_STATES:
        return first
    if (sqlstate is None and isinstance(cause, psycopg.OperationalError)) or (sqlstate or "").startswith(
        "08"
    ):
        detail = " ".join(lines[:2]) if lines else first
        return f"cannot connect to the database: {detail}"
    return f"database error: {first}"


def to_json(value: Any) -> str:
    """Indented JSON; UUIDs and times as strings. Message ids must be made strings by the caller."""
    return json.dumps(value, indent=2, default=_json_default, ensure_ascii=False)


def _json_default(value: Any) -> Any:
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, Decimal):
        return str(value)
    raise TypeError(f"{type(value).__name__} is not JSON-serialisable")


# -- argument types: each raises ArgumentTypeError, which argparse turns into one line ------------------


def parse_duration(text: str) -> timedelta:
    """``7d``, ``12h``, ``30m``, ``3600s``, ``1w`` or combinations such as ``1h30m``."""
    compact = text.strip().lower()
    parts = _DURATION_PART.findall(compact)
    if not compact or _DURATION_PART.sub("", compact).strip():
        raise argparse.ArgumentTypeError(
            f"invalid duration {text!r}: use whole numbers with a unit s, m, h, d or w "
            "(e.g. 7d, 12h, 30m, 3600s, 1h30m)"
        )
    return timedelta(seconds=sum(int(number) * _DURATION_UNITS[unit] for number, unit in parts))


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}")
    return value


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds > 0, got {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a number of seconds > 0, got {text!r}")
    return value


def run_id(text: str) -> uuid.UUID:
    try:
        return uuid.UUID(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a UUID") from None


def load_json_argument(text: str, option: str = "--input") -> Any:
    """A JSON document, ``-`` for standard input or ``@path`` for a file.

    Read in ``handle`` rather than as an argparse type, because arguments are parsed twice (once to
    report usage errors) and standard input can be read only once.
    """
    source = option
    if text == "-":
        text, source = sys.stdin.read(), "standard input"
    elif text.startswith("@"):
        path = text[1:]
        try:
            with open(path, encoding="utf-8") as handle:
                text = handle.read()
        except OSError as exc:
            raise CommandError(f"{option}: cannot read {path}: {exc.strerror}") from None
        source = path
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise CommandError(f"{source} is not valid JSON: {exc}") from None


@contextmanager
def interrupted_as(message: str, code: int = 130) -> Iterator[None]:
    """Ctrl-C becomes one line and the conventional exit code instead of a traceback."""
    try:
        yield
    except KeyboardInterrupt:
        raise CommandError(message, returncode=code) from None
