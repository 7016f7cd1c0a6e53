"""Django admin for pgflow: read-only pages of flows, runs, step tasks, workers and schedules.

Nothing here writes a pgflow table: every field is read-only and add, change and delete are refused.
The run actions call the SQL API: cancel, retry and run now through ``pgflow_django.cancel_run``,
``retry_run`` and ``run_now`` (the paths of ``manage.py pgflow_cancel``, ``pgflow_retry`` and
``pgflow_run_now``), re-run through ``pgflow.rerun``; each is recorded in Django's admin log.
Schedules (``pgflow_django.admin.schedules``) are paused, resumed and triggered through their API.
Every page reads, and every action writes, the database ``admin.database`` chooses
(``PGFLOW["ADMIN_DATABASE"]``, reads through the project's routers).

Django's admin refuses to register models with a composite primary key (``Step``, ``StepState``,
``StepTask``), so steps and step states are tables on their flow's and run's pages, and the step
tasks list is a change list served under the runs' URLs (``run/tasks/``) with no change page.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.contrib import admin, messages
from django.db import DatabaseError, connections, models, transaction
from django.db.models import Count, OuterRef, QuerySet, Subquery
from django.http import HttpRequest, HttpResponse
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe

from pgflow_django.admin import dashboard as admin_dashboard
from pgflow_django.admin import lists as admin_lists
from pgflow_django.admin import queries
from pgflow_django.admin.database import AdminDatabaseMixin, database_of, read_database, write_database
from pgflow_django.admin.diagrams import dag
from pgflow_django.admin.lists import FlowFilter, clock, short_id, took, when
from pgflow_django.admin.permissions import NoEditsMixin
from pgflow_django.admin.schedules import ScheduleAdmin
from pgflow_django.db import queries as db_queries
from pgflow_django.db.query import fetch_all, fetch_value
from pgflow_django.flows.flow_control_table import FLOW_CONTROL_HEADERS, flow_control_cells
from pgflow_django.models import Dep, Flow, Run, Schedule, Step, StepState, StepTask, StepWait, Worker
from pgflow_django.runs import operations
from pgflow_django.runs.client import (
    CancelResult,
    RetryRefused,
    RunNotFound,
    RunNowRefused,
    cancel_run,
    delayed_until,
    retry_run,
    run_now,
    run_priority,
)
from pgflow_django.runs.recorded_errors import read_error
from pgflow_django.runs.versions import flow_versions, version_label

_MAX_MESSAGE_ID = 2**63 - 1
"""PGMQ message ids are bigint: a longer number matches no task."""

if TYPE_CHECKING:
    _FlowAdmin = admin.ModelAdmin[Flow]
    _RunAdmin = admin.ModelAdmin[Run]
    _StepTaskAdmin = admin.ModelAdmin[StepTask]
    _WorkerAdmin = admin.ModelAdmin[Worker]
else:  # ModelAdmin is not subscriptable at run time
    _FlowAdmin = _RunAdmin = _StepTaskAdmin = _WorkerAdmin = admin.ModelAdmin


class ReadOnlyAdminMixin(AdminDatabaseMixin, NoEditsMixin):
    """No add, change or delete; every field read-only; the pgflow admin stylesheet; rows read from
    the admin's database."""

    class Media:
        css = {"all": (admin_lists.CSS,)}

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[Any]:
        """Every concrete field, times shown to the second (Django's own format stops at minutes)."""
        admin_self: Any = self
        fields = [
            _to_the_second(f) if isinstance(f, models.DateTimeField) else f.name
            for f in admin_self.model._meta.concrete_fields
            if f.name != "pk"
        ]
        return [*fields, *admin_self.readonly_fields]

    def get_exclude(self, request: HttpRequest, obj: Any = None) -> list[str]:
        """The raw time fields, shown to the second by ``get_readonly_fields`` instead."""
        admin_self: Any = self
        times = [
            f.name for f in admin_self.model._meta.concrete_fields if isinstance(f, models.DateTimeField)
        ]
        return [*(admin_self.exclude or ()), *times]


def _to_the_second(field: models.DateTimeField[Any, Any]) -> Callable[[Any], str]:
    def show(obj: Any) -> str:
        return when(getattr(obj, field.name))

    show.__name__ = field.name
    return admin.display(description=str(field.verbose_name))(show)


def _table(headers: Sequence[str], rows: Sequence[Sequence[Any]], css_class: str) -> SafeString:
    head = format_html_join("", "<th>{}</th>", ((h,) for h in headers))
    body = format_html_join(
        "",
        "<tr>{}</tr>",
        (
            (format_html_join("", "<td>{}</td>", ((cell if cell is not None else "-",) for cell in row)),)
            for row in rows
        ),
    )
    return format_html(
        '<table class="{}"><thead><tr>{}</tr></thead><tbody>{}</tbody></table>', css_class, head, body
    )


def _diagram(svg: str) -> SafeString:
    """An SVG drawn by :mod:`pgflow_django.admin.diagrams.dag` (every text in it escaped), in a container
    it fits."""
    return format_html('<div class="pgflow-diagram">{}</div>', mark_safe(svg))


def _waited_for(wait: StepWait) -> SafeString | str:
    """What one wait waits for: the event (and key), the pinned event, the sleep, the child run."""
    if wait.kind == "event":
        keyed = f" with key {wait.event_key}" if wait.event_key is not None else ""
        pinned = " (delivered; completes at the next wait pass)" if wait.event_seq is not None else ""
        return f"event {wait.event_name}{keyed}{pinned}"
    if wait.kind == "subflow":
        if wait.child_run_id is None:
            return wait.error_message or "-"
        url = reverse("admin:pgflow_run_change", args=[wait.child_run_id])
        return format_html('child run <a href="{}">{}</a>', url, wait.child_run_id)
    return wait.error_message or "its time"


def _move_after(fields: Sequence[Any], anchor: str, name: str) -> list[Any]:
    rest = [field for field in fields if field != name]
    at = rest.index(anchor) + 1 if anchor in rest else 0
    return [*rest[:at], name, *rest[at:]]


def _effective(own: int | None, default: int | None) -> str:
    """A step option as it applies: the step's own value, or the flow's marked as such."""
    if own is not None:
        return str(own)
    return f"{default} (flow)" if default is not None else "-"


def _run_id(term: str) -> uuid.UUID | None:
    """A search term as the run id the run and task lists search by, or None when it is not one."""
    try:
        return uuid.UUID(term)
    except ValueError:
        return None


def _error_html(text: str | None) -> SafeString | None:
    """A recorded error as its one-line summary; a Django task's traceback in a collapsed block."""
    if not text:
        return None
    error = read_error(text)
    if error.traceback is None:
        return format_html("{}", error.summary)
    return format_html(
        '{}<details class="pgflow-traceback"><summary>traceback</summary><pre>{}</pre></details>',
        error.summary,
        error.traceback,
    )


_RAW_FLOW_COLUMNS = frozenset({"queue_mode", "version_of", "version_number", "version"})
"""Flow columns the page shows in a readable form instead (``routing``, ``version_shown``)."""


@admin.register(Flow)
class FlowAdmin(ReadOnlyAdminMixin, _FlowAdmin):
    list_display = (
        "flow_slug",
        "version_shown",
        "routing",
        "step_count",
        "opt_max_attempts",
        "opt_timeout",
        "created",
    )
    list_filter = (admin_lists.FlowKindFilter, "queue_mode")
    search_fields = ("flow_slug",)
    ordering = ("flow_slug",)
    readonly_fields = (
        "routing",
        "version_shown",
        "versions_table",
        "dag_picture",
        "steps_table",
        "flow_control",
    )
    exclude = ("queue_mode", "version_of", "version_number", "version")

    def get_fields(self, request: HttpRequest, obj: Any = None) -> list[Any]:
        """The DAG right after the slug: the picture is what the page is for; the version right after
        the slug too, and the table of every version below it."""
        fields = [name for name in super().get_fields(request, obj) if name not in _RAW_FLOW_COLUMNS]
        fields = _move_after(fields, "flow_slug", "dag_picture")
        fields = _move_after(fields, "flow_slug", "versions_table")
        return _move_after(fields, "flow_slug", "version_shown")

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        """One queue mode row: the readable ``routing`` in place of the raw column; one version row."""
        fields = super().get_readonly_fields(request, obj)
        return [name for name in fields if name not in _RAW_FLOW_COLUMNS]

    actions = ("pause_flows", "resume_flows")

    def has_pause_flows_permission(self, request: HttpRequest) -> bool:
        return request.user.is_active and request.user.has_perm("pgflow.pause_flow")

    @admin.action(description="Pause the workers of selected flows", permissions=["pause_flows"])
    def pause_flows(self, request: HttpRequest, queryset: QuerySet[Flow]) -> None:
        who = request.user.get_username()
        for flow in queryset.order_by("flow_slug"):
            pause = operations.pause(
                flow.flow_slug, detail=f"paused in the admin by {who}", using=write_database()
            )
            text = f"Paused flow {flow.flow_slug} ({pause.reason}): its workers stop at their next heartbeat."
            self.log_change(request, flow, text)
            self.message_user(request, text, messages.SUCCESS)

    @admin.action(description="Resume the workers of selected flows", permissions=["pause_flows"])
    def resume_flows(self, request: HttpRequest, queryset: QuerySet[Flow]) -> None:
        for flow in queryset.order_by("flow_slug"):
            cleared = operations.resume(flow.flow_slug, using=write_database())
            if cleared is None:
                self.message_user(request, f"Flow {flow.flow_slug} was not paused.", messages.WARNING)
                continue
            text = f"Resumed flow {flow.flow_slug} (cleared its {cleared.reason} pause)."
            self.log_change(request, flow, text)
            self.message_user(request, text, messages.SUCCESS)

    created = admin_lists.time_column("created", "created_at")

    @admin.display(description="queue mode", ordering="queue_mode")
    def routing(self, obj: Flow) -> str:
        return {"step": "per-step queues", "routed": "shared queues"}.get(obj.queue_mode, "plain")

    @admin.display(description="version", ordering="version_number")
    def version_shown(self, obj: Flow) -> str:
        return version_label(obj.version_number, obj.version)

    @admin.display(description="versions")
    def versions_table(self, obj: Flow) -> SafeString:
        """Every version of the flow: its runs by status, live workers, first and last start, state."""
        rows = [
            (
                format_html(
                    '<a href="{}">{}</a>',
                    reverse("admin:pgflow_flow_change", args=[found.flow_slug]),
                    found.name,
                ),
                found.flow_slug,
                found.state,
                found.unfinished,
                found.completed,
                found.failed,
                found.live_workers,
                admin_lists.when(found.first_started_at),
                admin_lists.when(found.last_started_at),
            )
            for found in flow_versions(obj.flow_slug, using=database_of(obj))
        ]
        headers = (
            "version",
            "stored as",
            "state",
            "unfinished",
            "completed",
            "failed",
            "workers",
            "first start",
            "last start",
        )
        return _table(headers, rows, "pgflow-steps pgflow-versions")

    @admin.display(description="steps")
    def step_count(self, obj: Flow) -> int:
        return Step.objects.using(database_of(obj)).filter(flow_id=obj.flow_slug).count()

    @admin.display(description="DAG")
    def dag_picture(self, obj: Flow) -> SafeString:
        return _diagram(dag.flow_svg(obj))

    @admin.display(description="steps")
    def steps_table(self, obj: Flow) -> SafeString:
        deps: dict[str, list[str]] = {}
        database = database_of(obj)
        for dep in Dep.objects.using(database).filter(flow_id=obj.flow_slug).order_by("dep_slug"):
            deps.setdefault(dep.step_slug, []).append(dep.dep_slug)
        rows = [
            (
                step.step_index,
                step.step_slug,
                step.step_type,
                step.queue_name,
                ", ".join(deps.get(step.step_slug, [])) or "-",
                f"max_attempts={_effective(step.opt_max_attempts, obj.opt_max_attempts)} "
                f"base_delay={_effective(step.opt_base_delay, obj.opt_base_delay)} "
                f"timeout={_effective(step.opt_timeout, obj.opt_timeout)} "
                f"start_delay={_effective(step.opt_start_delay, 0)}",
                step.when_unmet,
                step.when_exhausted,
            )
            for step in Step.objects.using(database).filter(flow_id=obj.flow_slug).order_by("step_index")
        ]
        headers = ("#", "step", "type", "queue", "depends on", "options", "when_unmet", "when_exhausted")
        return _table(headers, rows, "pgflow-steps")

    @admin.display(description="flow control")
    def flow_control(self, obj: Flow) -> SafeString | str:
        """Its concurrency keys and rate limits, with the started and deferred tasks of each key."""
        with connections[database_of(obj)].cursor() as cursor:
            found = fetch_all(cursor, db_queries.FLOW_CONTROL, {"flow": obj.flow_slug, "limit": 200})
        if not found:
            return "no concurrency key or rate limit"
        rows = [flow_control_cells(row)[1:] for row in found]
        return _table(FLOW_CONTROL_HEADERS[1:], rows, "pgflow-steps")


def _rerun(run_id: uuid.UUID) -> Any:
    database = write_database()
    with transaction.atomic(using=database), connections[database].cursor() as cursor:
        return fetch_value(cursor, queries.RERUN, [run_id])


def _cancel(run_id: uuid.UUID) -> CancelResult:
    return cancel_run(run_id, using=write_database())


def _retry(run_id: uuid.UUID) -> int:
    return retry_run(run_id, using=write_database())


def _run_now(run_id: uuid.UUID) -> int:
    return run_now(run_id, using=write_database())


@dataclass(frozen=True)
class Said:
    """A run action's message: ``html`` for the page, ``text`` for the admin log."""

    html: SafeString
    text: str


def _said(template: str, *args: Any) -> Said:
    """A run action's message: each run id (a UUID in ``args``) as the runs list shows it on the page
    (its last characters, linked to the run; hovering shows it whole, copying copies it whole), whole
    in the admin log."""
    shown = [
        short_id(arg, reverse("admin:pgflow_run_change", args=[arg])) if isinstance(arg, uuid.UUID) else arg
        for arg in args
    ]
    return Said(format_html(template, *shown), template.format(*args))


def _zoned(moment: datetime) -> str:
    """A time in the current time zone to the second, with the zone's name."""
    return timezone.localtime(moment).strftime("%Y-%m-%d %H:%M:%S %Z")


def _counted(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def _refused(run_id: uuid.UUID, error: Exception, not_done: str) -> Said:
    """Why an action did nothing to a run: the engine's reason (``run ID is completed: ...``), the run
    named once, as the list shows it; else ``Run ID was not <not_done>: <reason>``."""
    if isinstance(error, RunNotFound):
        return _said("Run {} was not {}: it no longer exists (pruned or deleted).", run_id, not_done)
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    reason = lines[0] if lines else type(error).__name__
    named = f"run {run_id} "
    if reason.startswith(named):
        return _said("Run {} {}", run_id, reason.removeprefix(named))
    return _said("Run {} was not {}: {}", run_id, not_done, reason)


@admin.register(Run)
class RunAdmin(ReadOnlyAdminMixin, _RunAdmin):
    list_display = (
        "short_run",
        "flow_name",
        "status_shown",
        "priority_shown",
        "started",
        "finished",
        "duration",
    )
    list_display_links = ("short_run",)
    list_filter = ("status", ("flow", FlowFilter))
    search_fields = ("run_id",)
    date_hierarchy = "started_at"
    ordering = ("-started_at",)
    readonly_fields = (
        "dag_picture",
        "timeline_picture",
        "parent_link",
        "waits_table",
        "children_table",
        "step_states_table",
        "tasks_link",
    )
    exclude = ("status", "error_message", "parent_run_id", "parent_step_slug", "parent_task_index")
    actions = ("cancel_runs", "retry_runs", "run_runs_now", "rerun_runs")

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        """The run's error shown as ``ExceptionClass: message`` (with its traceback collapsed), its
        status with its delayed start when it has one ahead."""
        fields = super().get_readonly_fields(request, obj)
        shown = {"error_message": "error", "status": "run_status"}
        return [shown.get(name, name) if isinstance(name, str) else name for name in fields]

    def get_fields(self, request: HttpRequest, obj: Any = None) -> list[Any]:
        """The parent run and the DAG right after the status, then the timeline, what the run waits for
        and its child runs, above the run's input and output, which can be long."""
        fields = _move_after(super().get_fields(request, obj), "run_status", "dag_picture")
        fields = _move_after(fields, "dag_picture", "timeline_picture")
        fields = _move_after(fields, "timeline_picture", "waits_table")
        fields = _move_after(fields, "waits_table", "children_table")
        return _move_after(fields, "run_status", "parent_link")

    short_run = admin_lists.id_column("run_id", "run")
    started = admin_lists.time_column("started", "started_at")

    @admin.display(description="flow", ordering="flow")
    def flow_name(self, obj: Run) -> str:
        return admin_lists.flow_name(obj)

    @admin.display(description="priority", ordering="priority")
    def priority_shown(self, obj: Run) -> str:
        return run_priority(obj.priority)

    @admin.display(description="status", ordering="status")
    def status_shown(self, obj: Run) -> SafeString | str:
        """The status; a started run whose delayed start is ahead shows until when it waits instead
        (the status filter still counts it as started)."""
        until = delayed_until(obj.status, obj.not_before)
        if until is None:
            return obj.get_status_display()
        return format_html(
            '<span class="pgflow-delayed" title="Started: its delayed start is at {}; Run now starts it'
            ' at once"><span>Delayed until</span> {}</span>',
            _zoned(until),
            clock(until),
        )

    @admin.display(description="status")
    def run_status(self, obj: Run) -> SafeString | str:
        """The status, and a delayed start still ahead: until when, and what starts it now."""
        until = delayed_until(obj.status, obj.not_before)
        if until is None:
            return obj.get_status_display()
        return format_html(
            '{} <span class="pgflow-delayed">· delayed until {}</span>: its first steps start then; '
            "the runs list's action \u201cRun selected delayed runs now\u201d starts it at once",
            obj.get_status_display(),
            _zoned(until),
        )

    finished = admin_lists.time_column("finished", "completed_at", "failed_at", sortable=False)

    @admin.display(description="duration")
    def duration(self, obj: Run) -> str:
        if delayed_until(obj.status, obj.not_before) is not None:
            return "-"  # not begun: the time since it was started is its delay, not its work
        return took(obj.started_at, obj.completed_at or obj.failed_at)

    @admin.display(description="error message")
    def error(self, obj: Run) -> SafeString | str:
        return _error_html(obj.error_message) or "-"

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Run], search_term: str
    ) -> tuple[QuerySet[Run], bool]:
        term = search_term.strip()
        if not term:
            return queryset, False
        run_id = _run_id(term)
        return (queryset.none() if run_id is None else queryset.filter(run_id=run_id)), False

    def has_cancel_runs_permission(self, request: HttpRequest) -> bool:
        return request.user.is_active and request.user.has_perm("pgflow.cancel_run")

    def has_rerun_runs_permission(self, request: HttpRequest) -> bool:
        return request.user.is_active and request.user.has_perm("pgflow.rerun_run")

    def has_retry_runs_permission(self, request: HttpRequest) -> bool:
        return request.user.is_active and request.user.has_perm("pgflow.retry_run")

    def has_run_runs_now_permission(self, request: HttpRequest) -> bool:
        return request.user.is_active and request.user.has_perm("pgflow.run_now")

    @admin.display(description="DAG")
    def dag_picture(self, obj: Run) -> SafeString:
        return _diagram(dag.run_svg(obj))

    @admin.display(description="timeline")
    def timeline_picture(self, obj: Run) -> SafeString:
        return _diagram(dag.run_timeline_svg(obj))

    @admin.display(description="parent run")
    def parent_link(self, obj: Run) -> SafeString | str:
        """A child run's parent, linked, with the subflow step (and element) that started it."""
        if obj.parent_run_id is None:
            return "-"
        url = reverse("admin:pgflow_run_change", args=[obj.parent_run_id])
        return format_html(
            '<a href="{}">{}</a> (step {}, task {})',
            url,
            obj.parent_run_id,
            obj.parent_step_slug,
            obj.parent_task_index,
        )

    @admin.display(description="waits")
    def waits_table(self, obj: Run) -> SafeString | str:
        """What the run's event, sleep and subflow steps wait for now (docs/durable.md)."""
        waits = list(
            StepWait.objects.using(database_of(obj))
            .filter(run_id=obj.run_id)
            .order_by("step_slug", "task_index")
        )
        if not waits:
            return "-"
        rows = [
            (
                wait.step_slug if wait.kind != "subflow" else f"{wait.step_slug}[{wait.task_index}]",
                wait.kind,
                _waited_for(wait),
                when(wait.since),
                (when(wait.due_at) if wait.due_at else "-")
                + (" (timeout)" if wait.kind == "event" and wait.due_at and wait.event_seq is None else ""),
            )
            for wait in waits
        ]
        return _table(("step", "kind", "waits for", "since", "until"), rows, "pgflow-waits")

    @admin.display(description="child runs")
    def children_table(self, obj: Run) -> SafeString | str:
        """The runs this run's subflow steps started, linked, in step and element order."""
        children = list(
            Run.objects.using(database_of(obj))
            .filter(parent_run_id=obj.run_id)
            .order_by("parent_step_slug", "parent_task_index", "run_id")
        )
        if not children:
            return "-"
        rows = [
            (
                format_html(
                    '<a href="{}">{}</a>', reverse("admin:pgflow_run_change", args=[c.run_id]), c.run_id
                ),
                c.flow_id,
                f"{c.parent_step_slug}[{c.parent_task_index}]",
                c.status,
                when(c.started_at),
                took(c.started_at, c.completed_at or c.failed_at),
            )
            for c in children
        ]
        return _table(("run", "flow", "step", "status", "started", "duration"), rows, "pgflow-children")

    @admin.display(description="step states")
    def step_states_table(self, obj: Run) -> SafeString:
        database = database_of(obj)
        states = {s.step_slug: s for s in StepState.objects.using(database).filter(run_id=obj.run_id)}
        order = list(
            Step.objects.using(database)
            .filter(flow_id=obj.flow_id)
            .order_by("step_index")
            .values_list("step_slug", flat=True)
        )
        order += sorted(set(states) - set(order))
        rows = [
            (
                s.step_slug,
                s.status,
                s.initial_tasks,
                s.remaining_tasks,
                s.remaining_deps,
                s.skip_reason,
                _error_html(s.error_message),
                when(s.started_at),
                when(s.completed_at or s.failed_at or s.skipped_at),
                took(s.started_at, s.completed_at or s.failed_at or s.skipped_at)
                if s.started_at and s.status != "cancelled"
                else "-",
            )
            for s in (states[slug] for slug in order if slug in states)
        ]
        headers = (
            "step",
            "status",
            "tasks",
            "remaining",
            "remaining deps",
            "skip reason",
            "error",
            "started",
            "finished",
            "duration",
        )
        return _table(headers, rows, "pgflow-step-states")

    @admin.display(description="tasks")
    def tasks_link(self, obj: Run) -> SafeString:
        url = reverse("admin:pgflow_steptask_changelist")
        return format_html('<a href="{}?q={}">step tasks of this run</a>', url, obj.run_id)

    def _act(
        self,
        request: HttpRequest,
        queryset: QuerySet[Run],
        call: Callable[[uuid.UUID], Any],
        describe: Callable[[Run, Any], tuple[bool, Said]],
        not_done: str,
    ) -> None:
        """``call`` each run, oldest first; ``describe`` says what it did (True) or why it did nothing
        (False); an error is ``_refused``'s line (``not_done``: ``retried``). What was done is logged."""
        done = skipped = 0
        for run in queryset.order_by("started_at"):
            try:
                result = call(run.run_id)
            except (DatabaseError, RunNotFound, RetryRefused, RunNowRefused) as error:
                skipped += 1
                self.message_user(request, _refused(run.run_id, error, not_done).html, messages.ERROR)
                continue
            ok, said = describe(run, result)
            if ok:
                done += 1
                self.log_change(request, run, said.text)
                self.message_user(request, said.html, messages.SUCCESS)
            else:
                skipped += 1
                self.message_user(request, said.html, messages.WARNING)
        if not done and not skipped:
            self.message_user(request, "No runs selected.", messages.WARNING)

    @admin.action(description="Cancel selected started runs", permissions=["cancel_runs"])
    def cancel_runs(self, request: HttpRequest, queryset: QuerySet[Run]) -> None:
        def describe(run: Run, result: CancelResult) -> tuple[bool, Said]:
            if result.cancelled:
                return True, _said("Cancelled run {}.", run.run_id)
            return False, _said("Run {} was not cancelled: it is {}.", run.run_id, result.status)

        self._act(request, queryset, _cancel, describe, "cancelled")

    @admin.action(description="Retry selected failed runs from where they failed", permissions=["retry_runs"])
    def retry_runs(self, request: HttpRequest, queryset: QuerySet[Run]) -> None:
        def describe(run: Run, queued: int) -> tuple[bool, Said]:
            failure = read_error(run.error_message).summary if run.error_message else "no error recorded"
            return True, _said(
                "Retried run {}: {} queued again; it had failed with: {}",
                run.run_id,
                _counted(queued, "task"),
                failure,
            )

        self._act(request, queryset, _retry, describe, "retried")

    @admin.action(description="Run selected delayed runs now", permissions=["run_runs_now"])
    def run_runs_now(self, request: HttpRequest, queryset: QuerySet[Run]) -> None:
        def describe(run: Run, visible: int) -> tuple[bool, Said]:
            if visible == 0:
                return False, _said("Run {} was not run now: nothing of it was waiting.", run.run_id)
            return True, _said(
                "Ran run {} now: {} can start at once.", run.run_id, _counted(visible, "waiting task")
            )

        self._act(request, queryset, _run_now, describe, "run now")

    @admin.action(description="Re-run selected finished runs", permissions=["rerun_runs"])
    def rerun_runs(self, request: HttpRequest, queryset: QuerySet[Run]) -> None:
        def describe(run: Run, result: Any) -> tuple[bool, Said]:
            return True, _said("Re-ran run {} as new run {}.", run.run_id, uuid.UUID(str(result)))

        finished = queryset.exclude(status="started")
        for run in queryset.filter(status="started"):
            said = _said("Run {} was not re-run: it is still started.", run.run_id)
            self.message_user(request, said.html, messages.WARNING)
        self._act(request, finished, _rerun, describe, "re-run")

    def get_urls(self) -> list[URLPattern]:
        tasks = StepTaskAdmin(StepTask, self.admin_site)
        view = self.admin_site.admin_view(tasks.changelist_view)
        return [
            path("tasks/", view, name="pgflow_steptask_changelist"),
            path("dashboard/", admin_dashboard.dashboard_view(self.admin_site), name="pgflow_dashboard"),
            *super().get_urls(),
        ]


class StepTaskAdmin(ReadOnlyAdminMixin, _StepTaskAdmin):
    """The step tasks change list (not registered: Django's admin refuses composite primary keys)."""

    list_display = (
        "run_link",
        "step_slug",
        "task_index",
        "status",
        "priority",
        "attempts",
        "queued",
        "duration",
        "worker",
        "message_id_text",
    )
    list_display_links = None
    list_filter = ("status", ("flow", FlowFilter), "queue_name", "step_slug")
    search_fields = ("run_id", "message_id", "queue_name")
    actions = None
    list_per_page = 100

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return (
            request.user.is_active
            and request.user.is_staff
            and (request.user.has_perm("pgflow.view_run") or request.user.has_perm("pgflow.view_steptask"))
        )

    def get_queryset(self, request: HttpRequest) -> QuerySet[StepTask]:
        """Each task's step position in its flow, so a run's tasks list in step order, then index."""
        position = Step.objects.filter(flow_id=OuterRef("flow_id"), step_slug=OuterRef("step_slug"))
        tasks = StepTask.objects.using(read_database(StepTask)).annotate(
            step_position=Subquery(position.values("step_index")), task_priority=admin_lists.task_priority()
        )
        return tasks.order_by(*self.get_ordering(request))

    def get_ordering(self, request: HttpRequest) -> tuple[str, ...]:
        """One run's tasks (searched by run id) by step then index; all tasks newest first."""
        if _run_id(request.GET.get("q", "").strip()) is None:
            return ("-queued_at", "run_id", "step_position", "task_index")
        return ("step_position", "task_index")

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[StepTask], search_term: str
    ) -> tuple[QuerySet[StepTask], bool]:
        term = search_term.strip()
        if not term:
            return queryset, False
        run_id = _run_id(term)
        if run_id is not None:
            return queryset.filter(run_id=run_id), False
        if term.isascii() and term.isdigit():  # str.isdigit() alone accepts "²", which int() refuses
            if len(term) > len(str(_MAX_MESSAGE_ID)) or int(term) > _MAX_MESSAGE_ID:
                return queryset.none(), False
            return queryset.filter(message_id=int(term)), False
        return queryset.filter(queue_name=term.lower()), False

    @admin.display(description="run", ordering="run_id")
    def run_link(self, obj: StepTask) -> SafeString | str:
        return short_id(obj.run_id, reverse("admin:pgflow_run_change", args=[obj.run_id]))

    @admin.display(description="tries", ordering="attempts_count")
    def attempts(self, obj: StepTask) -> int:
        return obj.attempts_count

    @admin.display(description="prio", ordering="task_priority")
    def priority(self, obj: StepTask) -> int:
        return int(getattr(obj, "task_priority", 0) or 0)

    @admin.display(description="queued", ordering="queued_at")
    def queued(self, obj: StepTask) -> SafeString | str:
        return clock(obj.queued_at)

    @admin.display(description="duration")
    def duration(self, obj: StepTask) -> str:
        """From claim to completion or failure (running time so far while it runs)."""
        return took(obj.started_at, obj.completed_at or obj.failed_at)

    worker = admin_lists.id_column("last_worker_id", "worker")

    @admin.display(description="msg id", ordering="message_id")
    def message_id_text(self, obj: StepTask) -> str:
        return "-" if obj.message_id is None else str(obj.message_id)

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        context = {"title": "Step tasks", **(extra_context or {})}
        return super().changelist_view(request, context)


@admin.register(Worker)
class WorkerAdmin(ReadOnlyAdminMixin, _WorkerAdmin):
    list_display = (
        "short_worker",
        "queues",
        "function_name",
        "heartbeat_age",
        "paused",
        "started",
        "stopped",
    )
    list_display_links = ("short_worker",)
    list_filter = (admin_lists.WorkerStateFilter, "queue_name", "function_name")
    search_fields = ("queue_name", "function_name")
    ordering = ("-last_heartbeat_at",)
    readonly_fields = ("heartbeat_age", "paused", "serves")

    short_worker = admin_lists.id_column("worker_id", "worker")

    def get_queryset(self, request: HttpRequest) -> QuerySet[Worker]:
        found: QuerySet[Worker] = super().get_queryset(request)
        return found.annotate(queue_count=Count("supports__queue_name", distinct=True))

    @admin.display(description="queue", ordering="queue_name")
    def queues(self, obj: Worker) -> str:
        """A worker serving several queues registers ``*``: say how many instead."""
        if obj.queue_name != db_queries.SEVERAL_QUEUES:
            return obj.queue_name
        return f"{getattr(obj, 'queue_count', 0)} queues"

    @admin.display(description="serves")
    def serves(self, obj: Worker) -> SafeString:
        """Each queue it polls with the steps it runs there (its support set)."""
        by_queue: dict[str, list[str]] = {}
        for support in obj.supports.order_by("queue_name", "flow_slug", "step_slug"):
            by_queue.setdefault(support.queue_name or obj.queue_name, []).append(
                f"{support.flow_slug}.{support.step_slug}"
            )
        return format_html_join(
            "",
            "<div><strong>{}</strong>: {}</div>",
            ((queue, ", ".join(steps)) for queue, steps in by_queue.items()),
        ) or mark_safe("-")

    started = admin_lists.time_column("started", "started_at")
    stopped = admin_lists.time_column("stopped", "stopped_at", "deprecated_at")

    @admin.display(description="heartbeat age", ordering="-last_heartbeat_at")
    def heartbeat_age(self, obj: Worker) -> str:
        seconds = max(0.0, (timezone.now() - obj.last_heartbeat_at).total_seconds())
        return f"{seconds:.0f}s"

    @admin.display(description="paused")
    def paused(self, obj: Worker) -> str:
        """The pauses holding the worker's subscriptions (its support set: a plain flow's steps, one
        step of a step-queued flow, a shared queue's routed steps), as the worker itself sees them."""
        with connections[database_of(obj)].cursor() as cursor:
            pauses = fetch_all(cursor, queries.WORKER_PAUSES, {"id": obj.worker_id})
        return ", ".join(f"{p.flow_slug} {p.step_slug or '(flow)'}: {p.reason}" for p in pauses) or "-"


admin.site.register(Schedule, ScheduleAdmin)
