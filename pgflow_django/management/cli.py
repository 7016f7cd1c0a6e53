"""Plumbing shared by the ``pgflow_*`` commands: one-line errors, JSON output, argument types, consoles.

Every command derives from ``PgflowCommand`` so that an operator (or a deploy script) always gets the
same contract: ``--help`` with examples, one line on stderr for any mistake, and documented exit codes
(0 success, 1 failure, 2 bad arguments). Text that comes from users (handler errors, inputs, outputs,
pause notes) is printed through ``printable``: it never reaches the terminal as control sequences or
as Rich markup.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
import textwrap
import uuid
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from datetime import date, datetime, timedelta
from decimal import Decimal
from typing import Any, ClassVar, Final, TextIO

import psycopg
from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import (
    BaseCommand,
    CommandError,
    CommandParser,
    DjangoHelpFormatter,
    OutputWrapper,
)
from django.db import Error as DjangoDatabaseError
from rich.console import Console
from rich.markup import escape

from pgflow_django.db.dbguard import require_postgresql
from pgflow_django.db.pooler import prepared_statement_problem
from pgflow_django.flows.dsl import FlowDefinitionError, priority_problem
from pgflow_django.flows.registry import FlowNotRegistered
from pgflow_django.flows.slugs import InvalidSlug
from pgflow_django.runs.client import InvalidInput, RunIdInUse, RunNotFound
from pgflow_django.runs.encoding import idempotency_key_problem
from pgflow_django.runs.operations import FlowNotFound
from pgflow_django.runs.versions import VersionInUse

USAGE_ERROR: Final = 2
"""Exit code for bad arguments, as argparse uses."""
MAX_COUNT: Final = 2**31 - 1
"""Largest whole number an option takes (PostgreSQL's integer): a larger one is refused as an argument
rather than failing in the database."""
MAX_SECONDS: Final = 100 * 365 * 86400.0
"""Largest number of seconds an option takes (100 years): beyond it, time arithmetic overflows."""

_CONTROL: Final = re.compile(
    r"[\x00-\x09\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff]"
)
"""C0 (newline apart), DEL, C1, the bidirectional overrides that reorder what a terminal shows, and
lone surrogates (which no terminal encoding can write)."""
_SGR: Final = re.compile(r"\x1b\[[0-9;]*m")
"""A colour code, as Django's terminal styles write them."""
_SHOWN_ARGUMENT: Final = 40
DEFAULT_WIDTH: Final = 80
"""Columns of output that is neither a terminal nor given ``COLUMNS``."""
MAX_WIDTH: Final = 10_000

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
    RunIdInUse,
    RunNotFound,
    VersionInUse,
)
"""Configuration and input mistakes whose message is already the one line to show."""


class HelpFormatter(DjangoHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Django's option order; the description and epilog are filled to the terminal's width paragraph
    by paragraph, except indented blocks (the examples), which keep their lines."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        filled = []
        for paragraph in re.split(r"\n\s*\n", text.strip("\n")):
            lines = paragraph.splitlines()
            if any(line[:1].isspace() for line in lines):
                filled.append("\n".join(indent + line for line in lines))
            else:
                words = " ".join(paragraph.split())
                filled.append(textwrap.fill(words, width, initial_indent=indent, subsequent_indent=indent))
        return "\n\n".join(filled)


class PgflowCommand(BaseCommand):
    """A command whose every failure is one clear line on stderr and a non-zero exit code."""

    examples: ClassVar[str] = ""
    """Shown under ``--help`` after the options."""

    database_option: ClassVar[bool] = True
    """Take ``--database ALIAS``: the command then works on ``self.using``'s pgflow schema."""

    using: str = "default"

    requires_system_checks = []
    """No system checks first: each command checks what it needs and says it in one line, and an
    unrelated finding (another flow's bad slug) must not stop ``pgflow_runs`` or ``pgflow_pause``.
    ``manage.py check`` runs them (pgflow_django.checks)."""

    def create_parser(self, prog_name: str, subcommand: str, **kwargs: Any) -> CommandParser:
        kwargs.setdefault("formatter_class", HelpFormatter)
        if self.examples:
            kwargs.setdefault("epilog", f"examples:\n{self.examples.strip(chr(10)).rstrip()}")
        parser = super().create_parser(prog_name, subcommand, **kwargs)
        if self.database_option:
            add_database_argument(parser)
        return parser

    def run_from_argv(self, argv: list[str]) -> None:
        """Parse once up front so that a bad argument is one line and exit 2, not usage text."""
        parser = self.create_parser(argv[0], argv[1])
        try:
            self.check_arguments(vars(parser.parse_args(argv[2:])))
        except CommandError as exc:
            message = printable(str(exc).removeprefix("Error: "))
            self.stderr.write(f"{parser.prog}: error: {message} (see --help)")
            sys.exit(USAGE_ERROR)
        super().run_from_argv(argv)

    def check_arguments(self, options: dict[str, Any]) -> None:
        """What argparse cannot check while it parses, checked after it (``CommandError``): a command
        line's mistake is then reported as argparse reports its own."""

    def execute(self, *args: Any, **options: Any) -> Any:
        """Plain writes and the final error line are stripped of control characters: both may carry
        text from the database or the command line."""
        for name in ("stdout", "stderr"):  # call_command's streams: Django wraps them again (and ends lines)
            if options.get(name):
                options[name] = PrintableOutput(options[name], ending="")
        self.stdout = PrintableOutput(self.stdout)
        self.stderr = PrintableOutput(self.stderr)
        try:
            return super().execute(*args, **options)
        except CommandError as exc:
            message = printable(str(exc), newlines=True)
            if message == str(exc):
                raise
            raise CommandError(message, returncode=exc.returncode) from exc

    def handle(self, *args: Any, **options: Any) -> None:
        self.using = database_alias(options.get("database") or "default")
        try:
            require_postgresql(self.using)
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
        return console.status(printable(message, markup=True)) if console.is_terminal else nullcontext()

    def write_json(self, value: Any) -> None:
        self.stdout.write(to_json(value))


class PrintableOutput(OutputWrapper):
    """Django's output wrapper, writing every message through ``printable`` (newlines kept).

    A safety net under the commands' own escaping of user text: only the colour codes of Django's
    ``self.style`` (SGR sequences) pass through as they are."""

    def __init__(self, out: Any, ending: str = "\n") -> None:
        super().__init__(getattr(out, "_out", out), ending)
        self.style_func = getattr(out, "style_func", None)

    def write(self, msg: str = "", style_func: Any = None, ending: str | None = None) -> None:  # type: ignore[override]
        parts = _SGR.split(msg)
        codes = _SGR.findall(msg)
        text = printable(parts[0], newlines=True) + "".join(
            code + printable(part, newlines=True) for code, part in zip(codes, parts[1:], strict=True)
        )
        super().write(text, style_func, ending)


def make_console(stream: Any, *, no_color: bool = False) -> Console:
    """A rich console on the stream under Django's ``OutputWrapper`` (which would add newlines), as
    wide as the terminal, or when the stream is not one, as ``piped_width``.

    Markup is off: no string printed through it is read as Rich markup, so a ``[/bold]`` in a handler
    error is shown, not parsed (or crashed on). Control characters are ``printable``'s job."""
    out: TextIO = stream
    while isinstance(out, OutputWrapper):
        out = out._out
    is_tty = bool(getattr(out, "isatty", lambda: False)())
    return Console(
        file=out, no_color=no_color, highlight=False, markup=False, width=None if is_tty else piped_width()
    )


def piped_width() -> int:
    """The width of output that is not a terminal (a pipe, a file, a test): ``COLUMNS`` when it is
    set to a whole number, else 80. A terminal's own width is Rich's to find (it honours ``COLUMNS``
    too)."""
    columns = os.environ.get("COLUMNS", "").strip()
    if columns.isascii() and columns.isdigit() and 0 < int(columns) <= MAX_WIDTH:
        return int(columns)
    return DEFAULT_WIDTH


def printable(value: object, *, newlines: bool = False, markup: bool = False) -> str:
    """User-controlled text made safe to print: control characters (ESC, OSC, C0 and C1, DEL, bidi
    overrides) become visible ``\\xNN`` escapes, so nothing typed into an error or an input drives
    the operator's terminal. ``newlines`` keeps line breaks (else they read as spaces); ``markup``
    also escapes Rich markup, for the few renderables that parse it whatever the console says
    (progress and status descriptions)."""
    text = str(value).replace("\r\n", "\n")
    if not newlines:
        text = text.replace("\n", " ")
    text = _CONTROL.sub(_visible, text)
    return escape(text) if markup else text


def _visible(match: re.Match[str]) -> str:
    code = ord(match.group())
    if code == 0x09:
        return "    "
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def shown_argument(text: str) -> str:
    """An argument quoted in an error message, cut short: a 5,000-digit number is not repeated."""
    return repr(text if len(text) <= _SHOWN_ARGUMENT else f"{text[:_SHOWN_ARGUMENT]}...")


def one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def describe_database_error(exc: BaseException) -> str:
    """One line that says what went wrong with the database and, where known, what to do."""
    pooled = prepared_statement_problem(exc)
    if pooled is not None:
        return pooled
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
    """Indented JSON; UUIDs and times as strings. Message ids must be made strings by the caller.

    Non-ASCII text stays readable, except the characters ``printable`` escapes: JSON escapes C0 on its
    own, and DEL, C1 and bidi overrides become ``\\uXXXX`` here (the same JSON value)."""
    text = json.dumps(value, indent=2, default=_json_default, ensure_ascii=False)
    return _CONTROL.sub(lambda match: f"\\u{ord(match.group()):04x}", text)


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
    """``7d``, ``12h``, ``30m``, ``3600s``, ``1w`` or combinations such as ``1h30m``, up to 100 years."""
    compact = text.strip().lower()
    parts = _DURATION_PART.findall(compact) if compact.isascii() else []
    if not parts or _DURATION_PART.sub("", compact).strip():
        raise argparse.ArgumentTypeError(
            f"invalid duration {shown_argument(text)}: use whole numbers with a unit s, m, h, d or w "
            "(e.g. 7d, 12h, 30m, 3600s, 1h30m)"
        )
    seconds = 0
    for number, unit in parts:
        if len(number.lstrip("0")) > 12:
            seconds = int(MAX_SECONDS) + 1
            break
        seconds += int(number) * _DURATION_UNITS[unit]
    if seconds > MAX_SECONDS:
        raise argparse.ArgumentTypeError(
            f"duration {shown_argument(text)} is too long: at most {int(MAX_SECONDS) // 86400}d (100 years)"
        )
    return timedelta(seconds=seconds)


def database_alias(text: str) -> str:
    """``--database``: a key of ``settings.DATABASES``, or one line listing the ones there are."""
    from django.db import connections

    if text not in connections.settings:
        known = ", ".join(sorted(connections.settings))
        raise CommandError(f"unknown database alias {printable(text)!r}; DATABASES has: {known}")
    return text


def add_database_argument(parser: CommandParser) -> None:
    """The ``--database ALIAS`` option of every pgflow command (checked by :func:`database_alias`)."""
    parser.add_argument(
        "--database",
        default="default",
        metavar="ALIAS",
        help="the Django database alias whose pgflow schema to use (default: 'default')",
    )


def add_format_argument(parser: CommandParser) -> None:
    """The ``--format text|json`` option of every command that reports (JSON through :func:`to_json`)."""
    parser.add_argument("--format", choices=["text", "json"], default="text", help="output format")


def add_retention_argument(parser: CommandParser, keeps: str) -> None:
    """The required ``--older-than DURATION`` of the pruning commands; ``keeps`` says what stays."""
    parser.add_argument(
        "--older-than",
        required=True,
        type=parse_duration,
        metavar="DURATION",
        help=f"retention: keep {keeps} (e.g. 7d, 12h, 30m, 3600s)",
    )


def positive_int(text: str) -> int:
    """A whole number from 1 to ``MAX_COUNT``, written in ASCII digits."""
    return _whole_number(text, 1)


def non_negative_int(text: str) -> int:
    """A whole number from 0 to ``MAX_COUNT``, written in ASCII digits (0 turns a feature off)."""
    return _whole_number(text, 0)


def _whole_number(text: str, lowest: int) -> int:
    digits = text.strip().removeprefix("+")
    significant = digits.lstrip("0")
    if not (digits.isascii() and digits.isdigit()):
        raise argparse.ArgumentTypeError(f"expected a whole number >= {lowest}, got {shown_argument(text)}")
    if len(significant) > len(str(MAX_COUNT)) or int(significant or "0") > MAX_COUNT:
        raise argparse.ArgumentTypeError(
            f"expected a whole number from {lowest} to {MAX_COUNT}, got {shown_argument(text)}"
        )
    value = int(significant or "0")
    if value < lowest:
        raise argparse.ArgumentTypeError(f"expected a whole number >= {lowest}, got {shown_argument(text)}")
    return value


def positive_float(text: str) -> float:
    """A number of seconds above 0 and at most ``MAX_SECONDS`` (100 years), written in ASCII."""
    stripped = text.strip()
    try:
        value = float(stripped) if stripped.isascii() and len(stripped) <= 64 else math.nan
    except ValueError:
        value = math.nan
    if not 0 < value <= MAX_SECONDS:
        raise argparse.ArgumentTypeError(
            f"expected a number of seconds > 0 (at most {MAX_SECONDS:.0f}, 100 years), "
            f"got {shown_argument(text)}"
        )
    return value


def priority(text: str) -> int:
    """A claim priority: a whole number from -100 to 100."""
    stripped = text.strip()
    value: object = int(stripped) if re.fullmatch(r"[+-]?[0-9]{1,4}", stripped) else text
    problem = priority_problem(value)
    if problem is not None:
        raise argparse.ArgumentTypeError(problem.rsplit(", got ", 1)[0] + f", got {shown_argument(text)}")
    return int(stripped)


def run_id(text: str) -> uuid.UUID:
    try:
        return uuid.UUID(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{shown_argument(text)} is not a UUID") from None


def idempotency_key(text: str) -> str:
    """An idempotency key: a command line's bytes that are not UTF-8 arrive as lone surrogates."""
    problem = idempotency_key_problem(text)
    if problem is not None:
        raise argparse.ArgumentTypeError(problem)
    return text


def load_json_argument(text: str, option: str = "--input") -> Any:
    """A JSON document, ``-`` for standard input or ``@path`` for a file.

    Read in ``handle`` rather than as an argparse type, because arguments are parsed twice (once to
    report usage errors) and standard input can be read only once. A document Python cannot read
    back (an integer of more than 4,300 digits, nesting deeper than the interpreter's recursion
    limit) is refused like malformed JSON: one line, exit 2.
    """
    source = option
    if text == "-":
        text, source = sys.stdin.read(), "standard input"
    elif text.startswith("@"):
        path = text[1:]
        try:
            with open(path, encoding="utf-8") as handle:
                text = handle.read()
        except (OSError, ValueError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
            raise CommandError(f"{option}: cannot read {path}: {reason}", returncode=USAGE_ERROR) from None
        source = path
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise CommandError(f"{source} is not valid JSON: {exc}", returncode=USAGE_ERROR) from None
    except RecursionError:
        raise CommandError(
            f"{source} is nested too deeply to read (more than about {sys.getrecursionlimit()} levels)",
            returncode=USAGE_ERROR,
        ) from None
    except ValueError as exc:
        raise CommandError(f"{source} cannot be read: {one_line(exc)}", returncode=USAGE_ERROR) from None


@contextmanager
def interrupted_as(message: str, code: int = 130) -> Iterator[None]:
    """Ctrl-C becomes one line and the conventional exit code instead of a traceback."""
    try:
        yield
    except KeyboardInterrupt:
        raise CommandError(message, returncode=code) from None
