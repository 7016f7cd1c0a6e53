"""User-controlled text printed by the commands and shown by the admin: handler errors, inputs,
outputs and notes never drive the terminal (no control sequences) and are never read as Rich markup;
a Django task's recorded error reads ``ExceptionClass: message``, its traceback on request."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from django.core.management.base import CommandError
from django.test import Client
from django.urls import reverse

from pgflow_django import start_flow
from pgflow_django.flows.compiler import compile_flow
from pgflow_django.management.cli import to_json
from pgflow_django.tasks import TaskFailure
from tests.integration import commands_flows
from tests.integration.commands_support import call
from tests.sql import support

HOSTILE = (
    "bad [/bold] [link=https://evil.example]click[/link] [bold red]x "
    "\x1b]8;;https://evil.example\x1b\\osc link\x1b]8;;\x1b\\ \x1b[2J\x1b[31mred\x07 \x9b31m c1 \u202etxt"
)
"""Closing tag with no opening one (MarkupError in Rich), a link, OSC 8, clear-screen, SGR, BEL, a
C1 CSI and a right-to-left override."""


def assert_inert(text: str) -> None:
    """Nothing that a terminal acts on is left, and the markup is shown as typed."""
    for raw in ("\x1b", "\x07", "\x9b", "\u202e"):
        assert raw not in text, repr(text)
    assert "[/bold]" in text and "[link=https://evil.example]" in text
    assert "\\x1b]8;;https://evil.example" in text  # visible, not swallowed


def task_error_blob() -> str:
    """What the tasks backend records when a task function raises."""
    try:
        raise ValueError("bad [/bold] amount \x1b[2J")
    except ValueError as exc:
        return TaskFailure(exc).pgflow_error_text


@pytest.fixture
def failed_run() -> uuid.UUID:
    compile_flow(commands_flows.boom)
    run_id = start_flow("cmd_boom", {"note": HOSTILE})
    assert support.fail(support.claim_one("cmd_boom"), HOSTILE) == "failed"
    return run_id


@pytest.fixture
def task_run() -> uuid.UUID:
    compile_flow(commands_flows.boom)
    run_id = start_flow("cmd_boom", {})
    assert support.fail(support.claim_one("cmd_boom"), task_error_blob()) == "failed"
    return run_id


@pytest.fixture
def completed_run() -> uuid.UUID:
    compile_flow(commands_flows.greet)
    run_id = start_flow("cmd_greet", {"name": HOSTILE})
    support.run_step("cmd_greet", "hello", {"greeting": HOSTILE})
    support.run_step("cmd_greet", "shout", HOSTILE)
    return run_id


class TestRuns:
    def test_list(self, failed_run: uuid.UUID) -> None:
        out, _ = call("pgflow_runs", "--flow", "cmd_boom")
        assert str(failed_run) in out
        assert_inert(out)

    def test_detail_and_tasks(self, failed_run: uuid.UUID) -> None:
        out, _ = call("pgflow_runs", str(failed_run), "--tasks")
        assert "tasks" in out
        assert_inert(out)

    def test_output_of_a_completed_run(self, completed_run: uuid.UUID) -> None:
        out, _ = call("pgflow_runs", str(completed_run))
        assert "\x1b" not in out and "\u202e" not in out
        assert "[/bold]" in out and "\\u001b]8;;https://evil.example" in out

    def test_json_keeps_the_text_as_json_escapes(self, failed_run: uuid.UUID) -> None:
        out, _ = call("pgflow_runs", str(failed_run), "--format", "json")
        assert "\x1b" not in out and "\x9b" not in out and "\u202e" not in out
        assert json.loads(out)["error_message"] == f"step explode failed: {HOSTILE}"  # the same, escaped

    def test_watch(self, failed_run: uuid.UUID) -> None:
        compile_flow(commands_flows.greet)
        start_flow("cmd_greet", {"name": HOSTILE})
        out, _ = call("pgflow_runs", "--watch", "--iterations", "1")
        assert "active run(s)" in out and "\x1b" not in out


def test_pgflow_start_wait_reports_a_failed_run_without_control_characters(
    failed_run: uuid.UUID, settings: Any
) -> None:
    """The failure line of ``--wait`` carries the run's error; the run here has already failed."""
    with pytest.raises(CommandError) as caught:
        call(
            "pgflow_start",
            "cmd_boom",
            "--input",
            "{}",
            "--run-id",
            str(uuid.uuid4()),
            "--wait",
            "--timeout",
            "0.01",
        )
    assert "\x1b" not in str(caught.value)


def test_a_command_error_carrying_database_text_is_stripped() -> None:
    with pytest.raises(CommandError) as caught:
        call("pgflow_runs", "--flow", "a" * 10 + "\x1b[2J")
    assert "\x1b" not in str(caught.value) and "\\x1b[2J" in str(caught.value)


def test_pause_notes(settings: Any) -> None:
    compile_flow(commands_flows.greet)
    call("pgflow_pause", "cmd_greet", "--detail", HOSTILE)
    out, _ = call("pgflow_pause")
    assert "cmd_greet" in out
    assert_inert(out)


class TestDjangoTaskErrors:
    def test_shown_as_exception_class_and_message(self, task_run: uuid.UUID) -> None:
        out, _ = call("pgflow_runs", "--flow", "cmd_boom")
        assert "step explode failed: ValueError:" in out
        assert "django-task-error" not in out and "Traceback" not in out
        for args in ((str(task_run),), (str(task_run), "--tasks")):
            out, _ = call("pgflow_runs", *args)
            assert "ValueError: bad [/bold] amount \\x1b[2J" in out, args
            assert "django-task-error" not in out and "Traceback" not in out, args

    def test_traceback_on_request(self, task_run: uuid.UUID) -> None:
        out, _ = call("pgflow_runs", str(task_run), "--tasks", "-v", "2")
        assert "traceback of explode[0]:" in out
        assert "Traceback (most recent call last):" in out
        assert 'raise ValueError("bad [/bold] amount \\x1b[2J")' in out
        assert "\x1b" not in out

    def test_json_keeps_the_record(self, task_run: uuid.UUID) -> None:
        out, _ = call("pgflow_runs", str(task_run), "--format", "json")
        assert json.loads(out)["error_message"].startswith("step explode failed: django-task-error:{")

    def test_admin_run_page(self, admin_client: Client, task_run: uuid.UUID) -> None:
        response = admin_client.get(reverse("admin:pgflow_run_change", args=[task_run]))
        assert response.status_code == 200
        html = response.content.decode()
        assert "ValueError: bad [/bold] amount" in html
        assert "django-task-error" not in html
        assert '<details class="pgflow-traceback"><summary>traceback</summary><pre>Traceback' in html


def test_admin_shows_hostile_errors_escaped(admin_client: Client, failed_run: uuid.UUID) -> None:
    html = admin_client.get(reverse("admin:pgflow_run_change", args=[failed_run])).content.decode()
    assert "[link=https://evil.example]" in html and "<details" not in html


@pytest.mark.parametrize("term", ["²", "١٢", "12²", "9" * 30, "-1", "1e3"])
def test_admin_step_task_search_by_id_takes_ascii_digits_only(admin_client: Client, term: str) -> None:
    """``str.isdigit()`` is true for "²" and Arabic-Indic digits, which ``int()`` refuses or reads
    differently: these are no message ids, and a bigint overflow is none either."""
    compile_flow(commands_flows.greet)
    start_flow("cmd_greet", {"name": "ada"})
    response = admin_client.get("/admin/pgflow/run/tasks/", {"q": term})
    assert response.status_code == 200
    assert "0 step tasks" in response.content.decode() or "0 results" in response.content.decode()


def test_admin_step_task_search_by_message_id(admin_client: Client) -> None:
    compile_flow(commands_flows.greet)
    run_id = start_flow("cmd_greet", {"name": "ada"})
    message_id = support.val("select message_id from pgflow.step_tasks where run_id = %s", [run_id])
    html = admin_client.get("/admin/pgflow/run/tasks/", {"q": str(message_id)}).content.decode()
    assert str(run_id) in html


def test_to_json_escapes_c1_and_bidi_controls() -> None:
    text = to_json({"a": "\x9b\u202e\x1b"})
    assert text == '{\n  "a": "\\u009b\\u202e\\u001b"\n}'
    assert json.loads(text) == {"a": "\x9b\u202e\x1b"}
