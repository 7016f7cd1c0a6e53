"""``pgflow_runs --watch``: one snapshot of the active runs (step progress) and of the flow queues.

Two read-only statements per snapshot, on Django's connection (autocommit, so each snapshot is fresh).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db import connection
from django.utils import timezone
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from pgflow_django.management.progress import STATUS_STYLES, format_seconds

RUNS_SQL = """
with active as (
    select run_id, flow_slug, started_at, remaining_steps
    from pgflow.runs
    where status = 'started' and (%(flow)s::text is null or flow_slug = %(flow)s)
    order by started_at desc, run_id
    limit %(limit)s
)
select a.run_id, a.flow_slug, a.started_at, a.remaining_steps,
       ss.step_slug, ss.status, ss.initial_tasks,
       count(t.task_index) filter (where t.status = 'completed') as completed_tasks,
       count(t.task_index) as tasks
from active a
join pgflow.step_states ss on ss.run_id = a.run_id
join pgflow.steps s on s.flow_slug = ss.flow_slug and s.step_slug = ss.step_slug
left join pgflow.step_tasks t on t.run_id = ss.run_id and t.step_slug = ss.step_slug
group by a.run_id, a.flow_slug, a.started_at, a.remaining_steps,
         ss.step_slug, ss.status, ss.initial_tasks, s.step_index
order by a.started_at desc, a.run_id, s.step_index
"""

QUEUES_SQL = """
select m.queue_name, m.queue_length,
       (to_jsonb(m) ->> 'queue_visible_length')::bigint as visible,
       m.oldest_msg_age_sec
from pgmq.metrics_all() m
where m.queue_name in (
    select queue_name from pgflow.steps where %(flow)s::text is null or flow_slug = %(flow)s
)
order by m.queue_name
"""
"""``queue_visible_length`` is read through jsonb because older PGMQ releases do not report it."""


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
class Snapshot:
    taken_at: datetime
    runs: list[ActiveRun]
    queues: list[QueueDepth]


def take_snapshot(flow: str | None, limit: int) -> Snapshot:
    params: dict[str, Any] = {"flow": flow, "limit": limit}
    runs: dict[str, ActiveRun] = {}
    with connection.cursor() as cursor:
        cursor.execute(RUNS_SQL, params)
        for row in cursor.fetchall():
            run_id, flow_slug, started_at, remaining, step_slug, status, initial, completed, tasks = row
            run = runs.setdefault(str(run_id), ActiveRun(str(run_id), flow_slug, started_at, remaining))
            total = max(tasks, initial) if initial is not None else (tasks or None)
            run.steps.append(StepProgress(step_slug, status, completed, total))
        cursor.execute(QUEUES_SQL, params)
        queues = [QueueDepth(*row) for row in cursor.fetchall()]
    return Snapshot(timezone.now(), list(runs.values()), queues)


def render(snapshot: Snapshot, *, flow: str | None, interval: float, limit: int) -> RenderableType:
    header = Text(style="bold")
    header.append(f"pgflow: {len(snapshot.runs)} active run(s)")
    if flow:
        header.append(f" of {flow}")
    header.append(
        f"  {timezone.localtime(snapshot.taken_at):%Y-%m-%d %H:%M:%S}"
        f"  (every {format_seconds(interval)}; Ctrl-C to stop)",
        style="dim",
    )
    parts: list[RenderableType] = [header, _runs_table(snapshot)]
    if len(snapshot.runs) == limit:
        parts.append(Text(f"showing the newest {limit} active runs; use --limit for more", style="dim"))
    parts.append(_queues_table(snapshot))
    return Group(*parts)


def _runs_table(snapshot: Snapshot) -> RenderableType:
    if not snapshot.runs:
        return Text("no active runs")
    table = Table(title="active runs", title_justify="left")
    table.add_column("run id", no_wrap=True)
    table.add_column("flow")
    table.add_column("running for", justify="right")
    table.add_column("steps left", justify="right")
    table.add_column("step progress (completed/total tasks)", overflow="fold")
    for run in snapshot.runs:
        progress = Text()
        for index, step in enumerate(run.steps):
            if index:
                progress.append("  ")
            progress.append(f"{step.step_slug} {step.label}", style=STATUS_STYLES.get(step.status, ""))
        table.add_row(
            run.run_id,
            run.flow_slug,
            format_seconds(max(0.0, (snapshot.taken_at - run.started_at).total_seconds())),
            str(run.remaining_steps),
            progress,
        )
    return table


def _queues_table(snapshot: Snapshot) -> RenderableType:
    if not snapshot.queues:
        return Text("no flow queues")
    table = Table(title="queues", title_justify="left")
    table.add_column("queue")
    table.add_column("messages", justify="right")
    table.add_column("visible", justify="right")
    table.add_column("in flight / delayed", justify="right")
    table.add_column("oldest", justify="right")
    for queue in snapshot.queues:
        hidden = "" if queue.visible is None else str(queue.length - queue.visible)
        table.add_row(
            queue.queue_name,
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
