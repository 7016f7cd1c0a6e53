"""Rich renderings of runs and steps, shared by ``pgflow_start --wait`` and ``pgflow_runs``."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from rich.text import Text

from pgflow_django.flows.task_names import run_flow_name
from pgflow_django.management.cli import printable, to_json
from pgflow_django.management.layout import Column, FitTable, local_time
from pgflow_django.runs.client import RunView, StepStateView
from pgflow_django.runs.recorded_errors import read_error

STATUS_STYLES = {
    "created": "dim",
    "queued": "dim",
    "started": "cyan",
    "completed": "green",
    "failed": "bold red",
    "skipped": "yellow",
    "cancelled": "yellow",
}


NOTE_WIDTH = 24
"""Free text (an error, a skip reason) is not wrapped narrower than this: below, a table becomes records."""


DELAYED_STYLE = "yellow"
"""A started run that waits for its delayed start."""


def status_text(status: str) -> Text:
    return Text(printable(status), style=STATUS_STYLES.get(status, ""))


def delayed_until(moment: datetime, *, zone: bool = False) -> str:
    """What a delayed run waits for: ``delayed until 2026-12-07 09:00:00`` (``zone``: ``... UTC``)."""
    return f"delayed until {local_time(moment, zone=zone)}"


def error_summary(text: str | None) -> str:
    """A recorded error as one printable line (a Django task's ``ExceptionClass: message``)."""
    return "" if not text else printable(read_error(text).summary)


def error_traceback(text: str | None) -> str | None:
    """The traceback recorded with an error (Django tasks record one), printable, or None."""
    trace = read_error(text).traceback if text else None
    return None if trace is None else printable(trace.rstrip(), newlines=True)


def json_text(value: Any) -> Text:
    """A JSON value (an input or output) as indented text, its control characters escaped."""
    return Text(to_json(value))


def tasks_done(state: StepStateView) -> str:
    """``done/total`` tasks of a step; ``-`` while a map's size is not known yet."""
    if state.initial_tasks is None:
        return "-"
    if state.status in {"created", "skipped"}:
        return f"0/{state.initial_tasks}"
    return f"{state.initial_tasks - (state.remaining_tasks or 0)}/{state.initial_tasks}"


def steps_table(view: RunView, *, title: str | None = None) -> FitTable:
    table = FitTable(
        Column("step", title=True),
        Column("type", no_wrap=True),
        Column("status", no_wrap=True),
        Column("tasks", justify="right", no_wrap=True),
        Column("note", min_width=NOTE_WIDTH),
        title=title,
    )
    for state in view.steps:
        table.add_row(
            printable(state.step_slug),
            printable(state.step_type if state.kind == "handler" else state.kind),
            status_text(state.status),
            tasks_done(state),
            _note(state),
        )
    return table


def run_title(view: RunView) -> Text:
    title = Text()
    title.append(f"run {view.run_id} ", style="bold")
    title.append(f"of {printable(run_flow_name(view.flow_slug, view.input))}: ")
    title.append_text(status_text(view.status))
    if view.delayed_until is not None:  # its own line: a long title wraps, the time stays whole
        title.append(f"\n{delayed_until(view.delayed_until, zone=True)}", style=DELAYED_STYLE)
        title.append(" (pgflow_run_now starts it now)")
    elapsed = _elapsed(view.started_at, view.completed_at or view.failed_at)
    if elapsed:
        title.append(f" ({elapsed})")
    return title


def _note(state: StepStateView) -> str:
    if state.waiting is not None:
        return waiting_note(state)
    if state.error_message:
        return error_summary(state.error_message)
    if state.skip_reason:
        return printable(state.skip_reason.replace("_", " "))
    return ""


def waiting_note(state: StepStateView) -> str:
    """What a step waits for now, in one line: ``waits for order.approved (key 1042) until 12:00``."""
    wait = state.waiting
    assert wait is not None
    until = f" until {wait.until:%Y-%m-%d %H:%M:%S}" if wait.until is not None else ""
    if state.kind == "event":
        keyed = f" (key {wait.key})" if wait.key is not None else ""
        return printable(f"waits for {wait.event}{keyed}{until}")
    if state.kind == "subflow":
        return f"waits for child run {wait.child_run_id}" if wait.child_run_id else "waits for its child runs"
    return f"sleeps{until}"


def parent_and_children(view: RunView) -> str:
    """``parent run X`` and ``child runs: A, B``, for a run started by or starting other runs."""
    lines = []
    if view.parent_run_id is not None:
        lines.append(f"parent run {view.parent_run_id}")
    if view.child_run_ids:
        lines.append("child runs: " + ", ".join(str(child) for child in view.child_run_ids))
    return "\n".join(lines)


def _elapsed(start: datetime | None, end: datetime | None) -> str:
    if start is None or end is None:
        return ""
    return format_seconds((end - start).total_seconds())


def format_seconds(seconds: float) -> str:
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 120:
        return f"{seconds:.1f} s"
    minutes, rest = divmod(int(seconds), 60)
    return f"{minutes} min {rest} s"


def run_dict(view: RunView) -> dict[str, Any]:
    """A run as JSON-ready data (ids as strings; times ISO 8601)."""
    return {
        "run_id": str(view.run_id),
        "flow_slug": view.flow_slug,
        "status": view.status,
        "input": view.input,
        "output": view.output,
        "error_message": view.error_message,
        "remaining_steps": view.remaining_steps,
        "started_at": view.started_at,
        "completed_at": view.completed_at,
        "failed_at": view.failed_at,
        "not_before": view.not_before,
        "delayed_until": view.delayed_until,
        "parent_run_id": None if view.parent_run_id is None else str(view.parent_run_id),
        "child_run_ids": [str(child) for child in view.child_run_ids],
        "steps": [
            {
                "step_slug": state.step_slug,
                "step_type": state.step_type,
                "kind": state.kind,
                "waiting": None
                if state.waiting is None
                else {
                    "event": state.waiting.event,
                    "key": state.waiting.key,
                    "since": state.waiting.since,
                    "until": state.waiting.until,
                    "child_run_id": None
                    if state.waiting.child_run_id is None
                    else str(state.waiting.child_run_id),
                },
                "status": state.status,
                "tasks_total": state.initial_tasks,
                "tasks_remaining": state.remaining_tasks,
                "output": state.output,
                "error_message": state.error_message,
                "skip_reason": state.skip_reason,
                "started_at": state.started_at,
                "completed_at": state.completed_at,
                "failed_at": state.failed_at,
                "skipped_at": state.skipped_at,
            }
            for state in view.steps
        ],
    }
