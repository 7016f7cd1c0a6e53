"""What the commands print of user text, their argument bounds, and recorded-error summaries (no
database): control characters escaped, markup inert, edges of numbers refused in one line."""

from __future__ import annotations

import argparse
import uuid
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management.base import CommandError
from django.utils import timezone
from rich.console import Console

from pgflow_django.management.cli import (
    MAX_COUNT,
    PrintableOutput,
    load_json_argument,
    make_console,
    parse_duration,
    positive_float,
    positive_int,
    printable,
)
from pgflow_django.management.watch import ActiveRun, QueueDepth, StepProgress, WatchFrame, render
from pgflow_django.runs.recorded_errors import read_error
from pgflow_django.tasks import TaskFailure


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("plain", "plain"),
        ("\x1b[2Jcls", "\\x1b[2Jcls"),
        ("\x1b]8;;https://e.x\x1b\\link", "\\x1b]8;;https://e.x\\x1b\\link"),
        ("bell\x07 nul\x00 del\x7f c1\x9b", "bell\\x07 nul\\x00 del\\x7f c1\\x9b"),
        ("rtl\u202eoverride\u2066", "rtl\\u202eoverride\\u2066"),
        ("two\nlines\r\nthree", "two lines three"),
        ("tab\there", "tab    here"),
        ("[/bold] stays", "[/bold] stays"),
        ("naïve ünïcode 日本", "naïve ünïcode 日本"),
    ],
)
def test_printable(text: str, expected: str) -> None:
    assert printable(text) == expected


def test_printable_keeps_newlines_on_request_and_escapes_markup_on_request() -> None:
    assert printable("a\r\nb\x1b", newlines=True) == "a\nb\\x1b"
    assert printable("[/bold] [link=x]y", markup=True) == "\\[/bold] \\[link=x]y"


def test_consoles_never_read_markup() -> None:
    out = StringIO()
    make_console(out).print("[/bold] [link=https://e.x]click[/link] [red]x")
    assert out.getvalue() == "[/bold] [link=https://e.x]click[/link] [red]x\n"


def test_plain_writes_are_stripped_but_keep_django_colour_codes() -> None:
    out = StringIO()
    PrintableOutput(out).write("\x1b[32;1mok\x1b[0m \x1b]8;;x\x1b\\ \x07")
    assert out.getvalue() == "\x1b[32;1mok\x1b[0m \\x1b]8;;x\\x1b\\ \\x07\n"


@pytest.mark.parametrize("text", ["300000000w", "36501d", "9" * 5000 + "s", "1" * 13 + "w 1s", "²d", "٣h"])
def test_durations_beyond_100_years_or_in_foreign_digits_are_refused(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError) as caught:
        parse_duration(text)
    assert len(str(caught.value)) < 200
    assert parse_duration("36500d") == timedelta(days=36500)


@pytest.mark.parametrize(
    "text", ["99999999999999999999", str(MAX_COUNT + 1), "9" * 5000, "²", "١٢", "0x10", "1.0", "", " "]
)
def test_whole_numbers_are_ascii_and_bounded(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="expected a whole number") as caught:
        positive_int(text)
    assert len(str(caught.value)) < 200
    assert positive_int(str(MAX_COUNT)) == MAX_COUNT
    assert positive_int(" 007 ") == 7


@pytest.mark.parametrize("text", ["1e12", "3153600001", "1e400", "-inf", "nan", "9" * 5000, "٣", "0"])
def test_seconds_are_finite_positive_and_at_most_100_years(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=r"seconds > 0 \(at most 3153600000") as caught:
        positive_float(text)
    assert len(str(caught.value)) < 200
    assert positive_float("3153600000") == 3153600000.0


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ("9" * 5000, "--input cannot be read: Exceeds the limit (4300 digits)"),
        ("[" * 100_000 + "]" * 100_000, "--input is nested too deeply to read"),
        ("{oops", "--input is not valid JSON"),
    ],
)
def test_unreadable_json_is_one_line_and_exit_2(document: str, message: str) -> None:
    with pytest.raises(CommandError) as caught:
        load_json_argument(document)
    assert caught.value.returncode == 2
    assert str(caught.value).startswith(message)
    assert "\n" not in str(caught.value) and len(str(caught.value)) < 300


def _failure(exc: Exception) -> str:
    try:
        raise exc
    except Exception as raised:
        return TaskFailure(raised).pgflow_error_text


class Custom(Exception):
    pass


@pytest.mark.parametrize(
    ("exc", "summary"),
    [
        (ValueError("bad amount"), "ValueError: bad amount"),
        (KeyError("order"), "KeyError: 'order'"),
        (Custom("nested class path"), "Custom: nested class path"),
        (RuntimeError(), "RuntimeError"),
        (ValueError("two\nlines"), "ValueError: two"),
    ],
)
def test_a_django_task_error_reads_exception_class_and_message(exc: Exception, summary: str) -> None:
    error = read_error(_failure(exc))
    assert error.summary == summary
    assert error.traceback is not None and error.traceback.startswith("Traceback (most recent call last):")
    prefixed = read_error("step call failed: " + _failure(exc))
    assert prefixed.summary == f"step call failed: {summary}"


def test_other_errors_are_their_own_summary() -> None:
    for text in ("boom", "django-task-error:{not json", 'django-task-error:{"traceback": "x"}'):
        assert read_error(text).summary == text and read_error(text).traceback is None


def test_watch_stays_readable_at_80_columns() -> None:
    """Every entry (run id, flow, age, each step's progress, each queue's name and figures) appears
    whole on one line: lines break between entries, never inside a word."""
    now = timezone.now()
    steps = ["validate_order", "charge_customer", "reserve_stock", "notify_warehouse", "summarize"]
    runs = [
        ActiveRun(
            str(uuid.UUID(int=index)),
            "process_order_with_a_long_name",
            now - timedelta(seconds=75),
            4,
            [StepProgress(slug, "started", 3, 12) for slug in steps],
        )
        for index in range(2)
    ]
    queues = [
        QueueDepth("process_order_with_a_long_name", 120000, 99000, 4000),
        QueueDepth("support_steps__deliver", 12, None, None),
    ]
    out = StringIO()
    Console(file=out, width=80, no_color=True, markup=False).print(
        render(WatchFrame(now, runs, queues), flow=None, interval=2.0, limit=20)
    )
    lines = out.getvalue().splitlines()
    assert max(len(line) for line in lines) <= 80
    text = out.getvalue()
    expected = [
        *(run.run_id for run in runs),
        "process_order_with_a_long_name",
        "running for 75.0 s",
        "4 step(s) left",
        *(f"{slug} 3/12" for slug in steps),
        "support_steps__deliver",
        "120000",
        "99000",
        "21000",
        "66 min 40 s",
        "(every 2.0 s; Ctrl-C to stop)",
    ]
    for entry in expected:
        assert any(entry in line for line in lines), f"{entry!r} is broken across lines:\n{text}"


def test_call_command_streams_keep_their_line_endings() -> None:
    """``call_command(stdout=...)``: Django wraps the stream again; an ``ending=""`` write (a prompt,
    the coverage query) gets no newline from the inner wrapper."""
    from django.core.management.base import OutputWrapper

    out = StringIO()
    wrapped = OutputWrapper(PrintableOutput(out, ending=""))
    wrapped.write("Type the flow slug to confirm: ", ending="")
    wrapped.write("\x1b[2Jnext")
    assert out.getvalue() == "Type the flow slug to confirm: \\x1b[2Jnext\n"
