"""Django task flows named as people know them: by their function path (``myapp.tasks.send_welcome``).

The tasks backend makes one flow per task function and queue, with a hashed slug
(``myapp_tasks_send_welcome_7ba1832b``): listed beside the project's own flows, four tasks on two
queues would add eight names nobody wrote. Lists, filters and suggestions show the function path
instead, and leave task flows out of "known flows" unless the name asked about is itself a task
flow's slug.

The path comes from the database (a run's input names its task, and the slug's hash is checked
against it), so the admin and the commands name tasks alike whatever code they import.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from typing import Any

from pgflow_django.db.query import fetch_all
from pgflow_django.flows import queries
from pgflow_django.flows.slugs import (
    TASK_FLOW_SLUG_REGEX,
    TASK_STEP_SLUG,
    is_task_flow_slug_of,
    task_flow_slug,
)

_TASK_SLUG_RE = re.compile(TASK_FLOW_SLUG_REGEX)


@dataclass(frozen=True)
class TaskFlow:
    """A flow the tasks backend made, and the task function it runs (None when no run says which)."""

    flow_slug: str
    queue_name: str
    task_path: str | None


def task_flows(cursor: Any) -> list[TaskFlow]:
    """Every task flow compiled in the cursor's database, by slug."""
    rows = fetch_all(cursor, queries.TASK_FLOWS, {"step": TASK_STEP_SLUG, "pattern": TASK_FLOW_SLUG_REGEX})
    return [
        TaskFlow(
            row.flow_slug,
            row.queue_name,
            row.task_path
            if row.task_path and task_flow_slug(row.task_path, row.queue_name) == row.flow_slug
            else None,
        )
        for row in rows
    ]


def task_labels(found: list[TaskFlow]) -> dict[str, str]:
    """``{flow slug: name}`` for the task flows whose function is known: the function path, with its
    queue when the function has flows on several queues."""
    named = [flow for flow in found if flow.task_path is not None]
    queues = Counter(flow.task_path for flow in named)
    return {
        flow.flow_slug: (
            f"{flow.task_path} (queue {flow.queue_name})"
            if queues[flow.task_path] > 1
            else str(flow.task_path)
        )
        for flow in named
    }


def flow_labels(cursor: Any) -> dict[str, str]:
    """``{flow slug: name}`` for the task flows of the cursor's database (see ``task_labels``); a slug
    missing from it is shown as itself."""
    return task_labels(task_flows(cursor))


def run_task_path(flow_slug: str, task_path: Any) -> str | None:
    """A run's task function: ``task_path`` (its input's ``task``) when the run's flow is that
    function's task flow, else None."""
    if isinstance(task_path, str) and is_task_flow_slug_of(flow_slug, task_path):
        return task_path
    return None


def run_flow_name(flow_slug: str, run_input: Any) -> str:
    """A run's flow as people know it: its task's function path (read from the run's input, a dict,
    or given as the input's ``task`` text), else the flow slug."""
    task_path = run_input.get("task") if isinstance(run_input, dict) else run_input
    return run_task_path(flow_slug, task_path) or flow_slug


def asks_for_task_flows(name: str) -> bool:
    """True when ``name`` is shaped like a task flow's slug: whoever typed it is after task flows,
    so suggestions may include them."""
    return _TASK_SLUG_RE.search(name) is not None
