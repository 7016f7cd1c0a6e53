"""``pgflow_runs --watch``: one snapshot of the active runs (step progress) and of the flow queues.

Two read-only statements per snapshot, on Django's connection (autocommit, so each snapshot is fresh).
Laid out to stay readable in an 80-column terminal: a run is a line of its own (id, flow, age, steps
left) with its steps' progress below, wrapped between entries, never inside one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db import connections
from django.utils import timezone
from rich.console import Group, RenderableType
from rich.text import Text

from pgflow_django.db import queries as db_queries
from pgflow_django.db.query import fetch_all
from pgflow_django.flows.task_names import flow_labels
from pgflow_django.management import queries
from pgflow_django.management.cli import printable
from pgflow_django.management.layout import Column, FitTable, Wrapped
from pgflow_django.management.progress import STATUS_STYLES, format_seconds


@dataclass
class StepProgress:
    step_slug: str
    status: str
    completed: int
    total: int | None
    """None while a map's size is not known yet."""

    @property
    def label(self) -> str:
        return "-" if self.total is None else f"{self.completed}/{self.total}"


@dataclass
class ActiveRun:
    run_id: str
    flow_slug: str
    """As people know the flow: a Django task's function path, else the slug."""
    started_at: datetime
    remaining_steps: int
    steps: list[StepProgress] = field(default_factory=list)


@dataclass
class QueueDepth:
    queue_name: str
    length: int
    visible: int | None
    oldest_age_seconds: int | None


@dataclass
class WatchFrame:
    """One refresh of ``pgflow_runs --watch``: the active runs and the queue depths, taken together."""

    taken_at: datetime
    runs: list[ActiveRun]
    queues: list[QueueDepth]


def take_snapshot(flow: str | None, limit: int, *, using: str = "default") -> WatchFrame:
    params: dict[str, Any] = {"flow": flow, "limit": limit}
    runs: dict[str, ActiveRun] = {}
    with connections[using].cursor() as cursor:
        names = flow_labels(cursor)
        for row in fetch_all(cursor, queries.ACTIVE_RUN_STEPS, params):
            flow = names.get(row.flow_slug, row.flow_slug)
            run = runs.setdefault(
                str(row.run_id), ActiveRun(str(row.run_id), flow, row.started_at, row.remaining_steps)
            )
            tasks, initial = row.tasks, row.initial_tasks
            total = max(tasks, initial) if initial is not None else (tasks or None)
            run.steps.append(StepProgress(row.step_slug, row.status, row.completed_tasks, total))
        queues = [
            QueueDepth(row.queue_name, row.queue_length, row.visible, row.oldest_msg_age_sec)
            for row in fetch_all(cursor, db_queries.FLOW_QUEUE_DEPTHS, params)
        ]
    return WatchFrame(timezone.now(), list(runs.values()), queues)


def render(snapshot: WatchFrame, *, flow: str | None, interval: float, limit: int) -> RenderableType:
    title = f"pgflow: {len(snapshot.runs)} active run(s)" + (f" of {printable(flow)}" if flow else "")
    header = Wrapped(
        [
            Text(title, style="bold"),
            Text(f"{timezone.localtime(snapshot.taken_at):%Y-%m-%d %H:%M:%S}", style="dim"),
            Text(f"(every {format_seconds(interval)}; Ctrl-C to stop)", style="dim"),
        ]
    )
    parts: list[RenderableType] = [header, _runs_section(snapshot)]
    if len(snapshot.runs) == limit:
        parts.append(Text(f"showing the newest {limit} active runs; use --limit for more", style="dim"))
    parts.append(_queues_table(snapshot))
    return Group(*parts)


def _runs_section(snapshot: WatchFrame) -> RenderableType:
    if not snapshot.runs:
        return Text("no active runs")
    parts: list[RenderableType] = [Text("active runs (step: completed/total tasks)", style="italic")]
    for run in snapshot.runs:
        age = format_seconds(max(0.0, (snapshot.taken_at - run.started_at).total_seconds()))
        parts.append(
            Wrapped(
                [
                    Text(run.run_id, style="bold"),
                    Text(printable(run.flow_slug)),
                    Text(f"running for {age}"),
                    Text(f"{run.remaining_steps} step(s) left"),
                ]
            )
        )
        parts.append(
            Wrapped(
                [
                    Text(
                        f"{printable(step.step_slug)} {step.label}", style=STATUS_STYLES.get(step.status, "")
                    )
                    for step in run.steps
                ],
                indent=2,
            )
        )
    return Group(*parts)


def _queues_table(snapshot: WatchFrame) -> RenderableType:
    if not snapshot.queues:
        return Text("no flow queues")
    table = FitTable(
        Column("queue", title=True),
        *(Column(header, justify="right", no_wrap=True) for header in ("messages", "visible", "hidden")),
        Column("oldest", justify="right", no_wrap=True),
        title="queues (hidden: in flight or delayed)",
    )
    for queue in snapshot.queues:
        hidden = "" if queue.visible is None else str(queue.length - queue.visible)
        table.add_row(
            printable(queue.queue_name),
            str(queue.length),
            "" if queue.visible is None else str(queue.visible),
            hidden,
            _age(queue.oldest_age_seconds),
        )
    return table


def _age(seconds: int | None) -> str:
    """PGMQ reports message ages in whole seconds."""
    if seconds is None:
        return ""
    return f"{seconds} s" if seconds < 120 else format_seconds(seconds)
