"""The pgflow dashboard in the admin: what is running now, on one page that reloads itself.

Panels: runs started/completed/failed per minute over the last hour for each flow (SVG charts), the
depth and oldest message age of each queue the flows use, live workers and the steps each runs, paused
subscriptions, stalled tasks, and the concurrency keys and rate limits with their started and deferred
tasks, of the admin's database (``admin.database``). One bounded statement per panel
(``queries.DASHBOARD_*``, ``FLOW_QUEUE_DEPTHS``, ``ALL_PAUSES``); the page reloads with a
``<meta http-equiv="refresh">``, so there is no JavaScript.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.db import connections
from django.http import HttpRequest
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe

from pgflow_django.admin import queries
from pgflow_django.admin.database import read_database
from pgflow_django.admin.diagrams import rates
from pgflow_django.admin.diagrams.dag import duration_text
from pgflow_django.admin.lists import short_id, when
from pgflow_django.db import queries as db_queries
from pgflow_django.db.query import fetch_all
from pgflow_django.flows.flow_control_table import FLOW_CONTROL_HEADERS, flow_control_cells
from pgflow_django.flows.slugs import version_number, version_of
from pgflow_django.flows.task_names import flow_labels

REFRESH_SECONDS = 15
FLOW_CONTROL_ROWS = 50
"""Keys shown by the flow-control panel, the busiest first."""


@dataclass(frozen=True)
class Panel:
    key: str
    title: str
    body: SafeString


def _table(headers: Sequence[str], rows: Sequence[Sequence[Any]], empty: str) -> SafeString:
    if not rows:
        return format_html('<p class="pgflow-empty">{}</p>', empty)
    head = format_html_join("", "<th>{}</th>", ((h,) for h in headers))
    body = format_html_join(  # each cell names its column, the label of a phone's stacked rows
        "",
        "<tr>{}</tr>",
        (
            (format_html_join("", '<td data-label="{}">{}</td>', zip(headers, row, strict=True)),)
            for row in rows
        ),
    )
    return format_html("<table><thead><tr>{}</tr></thead><tbody>{}</tbody></table>", head, body)


def _flow_label(names: dict[str, str], flow_slug: str) -> str:
    """How the panels name a flow: a task's function, or the flow's slug with its version past the
    first (``orders v2`` for ``orders___v2``, docs/upgrading.md)."""
    if flow_slug in names:
        return names[flow_slug]
    number = version_number(flow_slug)
    return flow_slug if number == 1 else f"{version_of(flow_slug)} v{number}"


def _rates(cursor: Any, now: datetime, names: dict[str, str]) -> Panel:
    per_flow: dict[str, dict[datetime, tuple[int, int, int]]] = {}
    for row in fetch_all(cursor, queries.DASHBOARD_RUN_RATES):
        minute = timezone.localtime(row.minute).replace(second=0, microsecond=0)
        per_flow.setdefault(row.flow_slug, {})[minute] = (row.started, row.completed, row.failed)
    local_now = timezone.localtime(now)
    charts = format_html_join(
        "",
        '<div class="pgflow-rate-chart"><h3>{}</h3>{}</div>',
        (
            (_flow_label(names, slug), mark_safe(rates.render(slug, minutes, local_now)))
            for slug, minutes in per_flow.items()
        ),
    )
    legend = format_html_join(
        " ", '<span style="color:{}">\u25a0 {}</span>', ((colour, name) for name, colour in rates.SERIES)
    )
    body = (
        format_html("<p>{}</p>{}", legend, charts)
        if per_flow
        else format_html('<p class="pgflow-empty">{}</p>', "No run started or finished in the last hour.")
    )
    return Panel("rates", "Runs per minute, last hour", body)


def _queues(cursor: Any) -> Panel:
    rows = [
        (
            row.queue_name,
            row.queue_length,
            "-" if row.visible is None else row.visible,
            "-" if row.oldest_msg_age_sec is None else duration_text(row.oldest_msg_age_sec),
        )
        for row in fetch_all(cursor, db_queries.FLOW_QUEUE_DEPTHS, {"flow": None})
    ]
    headers = ("queue", "messages", "visible", "oldest message")
    return Panel("queues", "Queues", _table(headers, rows, "No flow queues."))


def _workers(cursor: Any) -> Panel:
    rows = [
        (
            short_id(row.worker_id, reverse("admin:pgflow_worker_change", args=[row.worker_id])),
            row.queue_name,
            row.function_name,
            duration_text(max(row.heartbeat_age, 0.0)),
            _first_steps(row.supports) or "-",
        )
        for row in fetch_all(cursor, queries.DASHBOARD_LIVE_WORKERS)
    ]
    headers = ("worker", "queue", "function", "heartbeat age", "runs steps")
    return Panel("workers", "Live workers", _table(headers, rows, "No live worker."))


SHOWN_STEPS = 8
"""Steps a worker's row names before "and N more": a worker serving the whole project runs dozens."""


def _first_steps(supports: str) -> str:
    steps = [step for step in supports.split(", ") if step]
    if len(steps) <= SHOWN_STEPS:
        return ", ".join(steps)
    return f"{', '.join(steps[:SHOWN_STEPS])} and {len(steps) - SHOWN_STEPS} more"


def _pauses(cursor: Any, names: dict[str, str]) -> Panel:
    rows = [
        (_flow_label(names, p.flow_slug), p.step_slug or "(flow)", p.reason, p.detail or "-")
        for p in fetch_all(cursor, db_queries.ALL_PAUSES)
    ]
    headers = ("flow", "step", "reason", "detail")
    return Panel("pauses", "Paused subscriptions", _table(headers, rows, "No paused subscription."))


def _stalled(cursor: Any, names: dict[str, str]) -> Panel:
    tasks_url = reverse("admin:pgflow_steptask_changelist")
    rows = [
        (
            short_id(row.run_id, reverse("admin:pgflow_run_change", args=[row.run_id])),
            _flow_label(names, row.flow_slug),
            format_html('<a href="{}?q={}">{}[{}]</a>', tasks_url, row.run_id, row.step_slug, row.task_index),
            short_id(row.last_worker_id),
            duration_text(row.claimed_for),
        )
        for row in fetch_all(cursor, queries.DASHBOARD_STALLED_TASKS)
    ]
    headers = ("run", "flow", "task", "worker", "claimed for")
    return Panel("stalled", "Stalled tasks", _table(headers, rows, "No stalled task."))


WAIT_KINDS = {"event": "wait for an event", "sleep": "sleep", "subflow": "wait for child runs"}


def _waits(cursor: Any, names: dict[str, str]) -> Panel:
    rows = [
        (
            _flow_label(names, row.flow_slug),
            WAIT_KINDS.get(row.kind, row.kind),
            row.runs,
            row.waits,
            when(row.oldest),
            when(row.next_due) if row.next_due else "-",
        )
        for row in fetch_all(cursor, queries.DASHBOARD_WAITS)
    ]
    headers = ("flow", "runs that", "runs", "waits", "waiting since", "next due")
    return Panel("waits", "Waiting and sleeping runs", _table(headers, rows, "No run waits."))


def _flow_control(cursor: Any) -> Panel:
    rows = [
        flow_control_cells(row)
        for row in fetch_all(cursor, db_queries.FLOW_CONTROL, {"flow": None, "limit": FLOW_CONTROL_ROWS})
    ]
    body = _table(FLOW_CONTROL_HEADERS, rows, "No concurrency key or rate limit.")
    return Panel("flow-control", "Concurrency keys and rate limits", body)


def panels(now: datetime) -> list[Panel]:
    """Every panel, each from its own statement, on the admin's database. Django task flows are named
    by their function path (``task_names``), not their hashed slugs."""
    with connections[read_database()].cursor() as cursor:
        names = flow_labels(cursor)
        return [
            _rates(cursor, now, names),
            _queues(cursor),
            _workers(cursor),
            _pauses(cursor, names),
            _stalled(cursor, names),
            _waits(cursor, names),
            _flow_control(cursor),
        ]


def dashboard_view(site: admin.AdminSite) -> Any:
    """The dashboard view of ``site``, for users who may view runs."""

    def view(request: HttpRequest) -> TemplateResponse:
        if not request.user.has_perm("pgflow.view_run"):
            raise PermissionDenied
        now = timezone.now()
        context = {
            **site.each_context(request),
            "title": "pgflow dashboard",
            "now": when(now),
            "refresh_seconds": REFRESH_SECONDS,
            "panels": panels(now),
        }
        return TemplateResponse(request, "pgflow_django/dashboard.html", context)

    return site.admin_view(view)
