"""A run's timeline as an SVG Gantt chart, drawn server-side with no JavaScript.

One row per step in definition order. A row's bar is light from when its first task was queued to
when its first task was claimed, then coloured by the step's status until its last task finished (or
now, while it runs). Failed attempts are red ticks at the time they failed, with the attempt number,
worker and error in the tick's tooltip, so retries show where they happened. A map step's tasks are
one row (their count and outcome in the label); the row links to the step's tasks for the detail.
Every text that reaches the SVG goes through ``escape``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db.models import Count, Max, Min, Q
from django.db.models.functions import Coalesce
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from django.utils.html import escape

from pgflow_django.admin.database import database_of
from pgflow_django.admin.diagrams import size_style
from pgflow_django.models import Run, Step, StepState, StepTask
from pgflow_django.runs.recorded_errors import read_error

LABEL_WIDTH = 200
ROW_HEIGHT = 24
BAR_HEIGHT = 14
AXIS_HEIGHT = 26
MARGIN = 12
FONT_SIZE = 11
TICKS = 6
WAITING_COLOUR = "#e5e7eb"
FAILURE_COLOUR = "#dc2626"


@dataclass(frozen=True)
class Failure:
    """One failed attempt of a task."""

    at: datetime
    attempt: int
    task_index: int
    error: str = ""


@dataclass(frozen=True)
class Row:
    """One step of the run: when its tasks were queued, first claimed and last finished."""

    step_slug: str
    status: str
    queued: datetime | None
    started: datetime | None
    finished: datetime | None
    tasks: int = 1
    summary: str = ""
    failures: tuple[Failure, ...] = field(default_factory=tuple)
    href: str = ""


def tick_label(seconds: float, span: float) -> str:
    """A tick's offset from the run's start, as precise as the span of the axis needs."""
    if span >= 600:
        return f"+{seconds / 60:.0f}m" if span >= 3600 else f"+{seconds / 60:.1f}m"
    if span >= 10:
        return f"+{seconds:.0f}s"
    return f"+{seconds:.1f}s" if span >= 1 else f"+{seconds:.2f}s"


def _axis(plot: float, span: float, height: float) -> list[str]:
    """The time axis: a grid line and a label per tick, from the start to ``span`` seconds on."""
    out: list[str] = []
    for tick in range(TICKS + 1):
        tx = MARGIN + LABEL_WIDTH + plot * tick / TICKS
        out.append(
            f'<line x1="{tx:.1f}" y1="{AXIS_HEIGHT - 6}" x2="{tx:.1f}" y2="{height - MARGIN}" '
            'stroke="#e5e7eb" stroke-width="1"/>'
        )
        anchor = "end" if tick == TICKS else "middle" if tick else "start"
        out.append(
            f'<text class="pgflow-tick" x="{tx:.1f}" y="{AXIS_HEIGHT - 10}" text-anchor="{anchor}" '
            f'fill="#4b5563">{escape(tick_label(span * tick / TICKS, span))}</text>'
        )
    return out


def render(
    rows: Sequence[Row], start: datetime, now: datetime, colours: dict[str, str], width: int, title: str = ""
) -> str:
    """The SVG of ``rows`` on a time axis from ``start`` to the last event (or ``now``)."""
    moments = [start]
    for row in rows:
        moments += [m for m in (row.queued, row.started, row.finished) if m is not None]
        moments += [f.at for f in row.failures]
        if row.started is not None and row.finished is None:
            moments.append(now)
    span = max((max(moments) - start).total_seconds(), 0.001)
    plot = width - LABEL_WIDTH - 2 * MARGIN

    def x(moment: datetime) -> float:
        return MARGIN + LABEL_WIDTH + plot * max(0.0, (moment - start).total_seconds()) / span

    height = AXIS_HEIGHT + ROW_HEIGHT * max(len(rows), 1) + MARGIN
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="pgflow-timeline" width="100%" '
        f'style="{size_style(width, FONT_SIZE)}" viewBox="0 0 {width} {height}" '
        f'role="img" aria-label="{escape(title)}" font-family="sans-serif" font-size="{FONT_SIZE}">',
        f"<title>{escape(title)}</title>",
    ]
    out += _axis(plot, span, height)
    for index, row in enumerate(rows):
        top = AXIS_HEIGHT + index * ROW_HEIGHT
        bar_top = top + (ROW_HEIGHT - BAR_HEIGHT) / 2
        label = row.step_slug if row.tasks == 1 else f"{row.step_slug} \u00d7{row.tasks}"
        out.append(
            f'<g class="pgflow-timeline-row pgflow-status-{escape(row.status)}" '
            f'data-step="{escape(row.step_slug)}">'
        )
        out.append(f"<title>{escape(row.step_slug)}: {escape(row.status)} {escape(row.summary)}</title>")
        text = f'<text x="{MARGIN}" y="{top + ROW_HEIGHT / 2 + 4}">{escape(label[:30])}</text>'
        if row.href:
            text = f'<a href="{escape(row.href)}">{text}</a>'
        out.append(text)
        end = row.finished or (now if row.started is not None else None)
        if row.queued is not None:
            wait_end = row.started or end or now  # still waiting for a worker
            out.append(
                f'<rect class="pgflow-waiting" x="{x(row.queued):.1f}" y="{bar_top:.1f}" '
                f'width="{max(x(wait_end) - x(row.queued), 1):.1f}" height="{BAR_HEIGHT}" '
                f'fill="{WAITING_COLOUR}"/>'
            )
        if row.started is not None and end is not None:
            out.append(
                f'<rect class="pgflow-running" x="{x(row.started):.1f}" y="{bar_top:.1f}" '
                f'width="{max(x(end) - x(row.started), 2):.1f}" height="{BAR_HEIGHT}" '
                f'fill="{escape(colours.get(row.status, WAITING_COLOUR))}" stroke="#374151" '
                'stroke-width="0.5"/>'
            )
        for failure in row.failures:
            fx = x(failure.at)
            what = f"task {failure.task_index} attempt {failure.attempt} failed: {failure.error}"
            out.append(
                f'<line class="pgflow-failure" x1="{fx:.1f}" y1="{bar_top - 3:.1f}" x2="{fx:.1f}" '
                f'y2="{bar_top + BAR_HEIGHT + 3:.1f}" stroke="{FAILURE_COLOUR}" stroke-width="2.5">'
                f"<title>{escape(what[:300])}</title></line>"
            )
        if row.summary:
            after = x(end or row.queued or start) + 4
            inside = after + 6 * len(row.summary) > width - MARGIN
            out.append(
                f'<text x="{(after - 8 if inside else after):.1f}" y="{top + ROW_HEIGHT / 2 + 4}" '
                f'fill="#111827" text-anchor="{"end" if inside else "start"}">'
                f"{escape(row.summary[:48])}</text>"
            )
        out.append("</g>")
    out.append("</svg>")
    return "".join(out)


FAILURES_SHOWN = 500
"""Failed attempts drawn per run at most (the first ones): a tick each."""


def _failures(run: Run) -> dict[str, list[Failure]]:
    found: dict[str, list[Failure]] = {}
    tasks = (
        StepTask.objects.using(database_of(run))
        .filter(run_id=run.run_id)
        .exclude(attempt_errors=[])
        .order_by("step_slug", "task_index")
        .values_list("step_slug", "task_index", "attempt_errors")[:FAILURES_SHOWN]
    )
    for step_slug, task_index, errors in tasks:
        for error in errors if isinstance(errors, list) else []:
            at = parse_datetime(str(error.get("failed_at", ""))) if isinstance(error, dict) else None
            if at is None:
                continue
            found.setdefault(step_slug, []).append(
                Failure(
                    at,
                    int(error.get("attempt") or 0),
                    task_index,
                    read_error(str(error.get("error") or "")).summary,
                )
            )
    return found


WAITING_SUMMARY = {
    "event": "waiting for an event",
    "sleep": "sleeping",
    "subflow": "waiting for {count} child run(s)",
}
"""What the bar of a started event, sleep or subflow step says: it waits, no worker runs it."""


def _summary(total: int, counts: dict[str, Any], failures: int) -> str:
    """``12 completed · 2 failures``: a map step's outcomes (its task count is in the label)."""
    parts = [f"{counts[name]} {name}" for name in ("completed", "failed", "started") if counts[name]]
    if total <= 1:
        parts = []
    if failures:
        parts.append(f"{failures} failure{'s' if failures > 1 else ''}")
    return " \u00b7 ".join(parts)


def run_rows(run: Run, tasks_href: dict[str, str] | None = None) -> list[Row]:
    """The rows of a run's timeline: one bounded aggregate per step, failures from attempt_errors;
    read from the run's database."""
    database = database_of(run)
    kinds = dict(
        Step.objects.using(database)
        .filter(flow_id=run.flow_id)
        .order_by("step_index")
        .values_list("step_slug", "step_kind")
    )
    steps = list(kinds)
    statuses = dict(
        StepState.objects.using(database).filter(run_id=run.run_id).values_list("step_slug", "status")
    )
    aggregates = {
        row["step_slug"]: row
        for row in StepTask.objects.using(database)
        .filter(run_id=run.run_id)
        .values("step_slug")
        .annotate(
            queued=Min("queued_at"),
            started=Min("started_at"),
            finished=Max(Coalesce("completed_at", "failed_at")),
            total=Count("task_index"),
            unfinished=Count("task_index", filter=Q(status__in=["queued", "started"])),
            completed=Count("task_index", filter=Q(status="completed")),
            failed=Count("task_index", filter=Q(status="failed")),
            running=Count("task_index", filter=Q(status="started")),
        )
        .order_by()
    }
    failures = _failures(run)
    rows = []
    for slug in steps:
        agg = aggregates.get(slug)
        status = statuses.get(slug, "created")
        if agg is None:
            rows.append(Row(slug, status, None, None, None, tasks=0, href=(tasks_href or {}).get(slug, "")))
            continue
        counts = {"completed": agg["completed"], "failed": agg["failed"], "started": agg["running"]}
        summary = _summary(agg["total"], counts, len(failures.get(slug, [])))
        if status == "started" and kinds.get(slug, "handler") != "handler":
            summary = WAITING_SUMMARY[kinds[slug]].format(count=agg["running"])
        rows.append(
            Row(
                slug,
                status,
                agg["queued"],
                agg["started"],
                None if agg["unfinished"] else agg["finished"],
                tasks=agg["total"],
                summary=summary,
                failures=tuple(failures.get(slug, [])),
                href=(tasks_href or {}).get(slug, ""),
            )
        )
    return rows


def run_timeline_svg(run: Run, colours: dict[str, str], width: int, tasks_href: dict[str, str]) -> str:
    """The run's timeline (see the module docstring)."""
    return render(
        run_rows(run, tasks_href),
        run.started_at,
        timezone.now(),
        colours,
        width,
        f"timeline of run {run.run_id}",
    )
