"""The schedules' admin pages: the list with next and last fire, a detail page with the coming fire
times and the recent ticks linked to their runs, and the pause, resume and trigger operations.

Nothing is written through the ORM: every operation calls the API of ``manage.py pgflow_schedules``
(``pause_schedule``, ``resume_schedule``, ``trigger_now``) and is recorded in Django's admin log. The
operations need the ``pgflow.change_schedule`` permission (superusers have it); they are POSTs
behind the admin's CSRF protection, from the change list's actions or the buttons of a detail page.
The pages read, and the operations write, the admin's database (``pgflow_django.admin.database``).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.db import DatabaseError
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from pgflow_django.admin.database import AdminDatabaseMixin, database_of, write_database
from pgflow_django.admin.permissions import NoEditsMixin
from pgflow_django.models import Schedule
from pgflow_django.schedules.cron import InvalidSchedule
from pgflow_django.schedules.report import WorkerGap, next_fire_times, run_statuses, state_of, worker_gaps
from pgflow_django.schedules.store import (
    ScheduleDeclared,
    ScheduleNotFound,
    get_schedule,
    pause_schedule,
    recent_ticks,
    resume_schedule,
    trigger_now,
)

SHOWN_FIRES = 10
SHOWN_TICKS = 20
OPERATE_PERMISSION = "pgflow.change_schedule"

if TYPE_CHECKING:
    _ScheduleAdmin = admin.ModelAdmin[Schedule]
else:  # ModelAdmin is not subscriptable at run time
    _ScheduleAdmin = admin.ModelAdmin

_ERRORS = (ScheduleNotFound, ScheduleDeclared, InvalidSchedule, DatabaseError)


def _zone(name: str) -> ZoneInfo:
    """The schedule's time zone; UTC for a stored name this host does not know, so one such schedule
    never breaks the pages of the others (its ``plan_error`` and ``pgflow.E032`` say what is wrong)."""
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        return ZoneInfo("UTC")


def _local(moment: datetime | None, zone: str) -> str:
    """A time in the schedule's own time zone, with its abbreviation and UTC offset."""
    if moment is None:
        return "-"
    local = moment.astimezone(_zone(zone))
    return f"{local:%Y-%m-%d %H:%M:%S} {local.tzname()} ({local:%z})"


def _short(moment: datetime | None, zone: str) -> str:
    """A time to the minute in the schedule's zone, for the list's narrow columns."""
    if moment is None:
        return "-"
    local = moment.astimezone(_zone(zone))
    return f"{local:%Y-%m-%d %H:%M} {local.tzname()}"


def _last_run(obj: Schedule, *, detailed: bool) -> SafeString | str:
    if obj.last_run_id is None:
        return "-"
    status = run_statuses([obj.last_run_id], using=database_of(obj)).get(obj.last_run_id)
    if status is None:
        return f"{obj.last_run_id} (pruned)"
    url = reverse("admin:pgflow_run_change", args=[obj.last_run_id])
    if detailed:
        return format_html('<a href="{}">{}</a> ({})', url, obj.last_run_id, status)
    return format_html('<a href="{}" title="run {}">{}</a>', url, obj.last_run_id, status)


def _worker_gap(obj: Schedule) -> WorkerGap | None:
    """Why an active schedule's runs would wait (no live worker for its flow), else None."""
    if not (obj.enabled and obj.paused_reason is None):
        return None
    gaps = worker_gaps([(obj.schedule_name, obj.flow_slug, obj.input)], using=database_of(obj))
    return gaps.get(obj.schedule_name)


class ScheduleAdmin(AdminDatabaseMixin, NoEditsMixin, _ScheduleAdmin):
    list_display = (
        "schedule_name",
        "flow_slug",
        "cron_in_zone",
        "next_fire",
        "last_fire",
        "last_run",
        "state",
    )
    list_filter = ("origin", "paused_reason", "enabled", "flow_slug")
    search_fields = ("schedule_name", "flow_slug")
    ordering = ("schedule_name",)
    actions = ("pause_schedules", "resume_schedules", "trigger_schedules")
    change_form_template = "admin/pgflow/schedule/change_form.html"
    fieldsets = (
        (
            None,
            {
                "fields": (
                    "schedule_name",
                    "flow_slug",
                    "cron",
                    "timezone",
                    "input",
                    "input_callable",
                    "catch_up",
                    "max_catch_up",
                    "jitter_seconds",
                    "enabled",
                    "origin",
                )
            },
        ),
        (
            "State",
            {
                "fields": (
                    "state",
                    "workers",
                    "next_fire_times",
                    "last_fired_at",
                    "last_run_detail",
                    "missed_ticks",
                    "last_error",
                    "plan_error",
                    "plan_failed_at",
                    "paused_at",
                )
            },
        ),
        ("Recent ticks", {"fields": ("recent_ticks_table",)}),
        ("Record", {"fields": ("revision", "created_at", "updated_at")}),
    )
    readonly_fields = (
        "state",
        "workers",
        "next_fire",
        "next_fire_times",
        "last_run",
        "last_run_detail",
        "recent_ticks_table",
    )

    def has_operate_permission(self, request: HttpRequest) -> bool:
        """Pause, resume and trigger: ``pgflow.change_schedule`` (superusers have every permission)."""
        return bool(request.user.is_active and request.user.has_perm(OPERATE_PERMISSION))

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        fields = [field.name for field in Schedule._meta.concrete_fields]
        return [*fields, *self.readonly_fields]

    @admin.display(description="state")
    def state(self, obj: Schedule) -> SafeString | str:
        """Its state (``; cannot plan`` while its planning fails: the reason is on its page), and under
        it ``no live worker`` when its flow has a step no live worker runs."""
        state = f"{state_of(obj)}; cannot plan" if obj.plan_error else state_of(obj)
        gap = _worker_gap(obj)
        if gap is None:
            return state
        return format_html(
            '{}<br><strong class="pgflow-no-worker" title="{}">{}</strong>',
            state,
            gap.detail,
            gap.warning,
        )

    @admin.display(description="workers")
    def workers(self, obj: Schedule) -> SafeString | str:
        """On the detail page: whether a live worker runs its flow, and if not, what to start."""
        if not (obj.enabled and obj.paused_reason is None):
            return "-"
        gap = _worker_gap(obj)
        if gap is None:
            return "a live worker runs each step of its flow"
        return format_html(
            '<strong class="pgflow-no-worker">{}</strong><br>start: {}',
            gap.detail,
            format_html_join(", ", "<code>{}</code>", ((command,) for command in gap.commands)),
        )

    @admin.display(description="cron", ordering="cron")
    def cron_in_zone(self, obj: Schedule) -> SafeString:
        return format_html("<code>{}</code> {}", obj.cron, obj.timezone)

    @admin.display(description="next fire", ordering="next_fire_at")
    def next_fire(self, obj: Schedule) -> str:
        active = obj.enabled and obj.paused_reason is None
        return _short(obj.next_fire_at, obj.timezone) if active else "-"

    @admin.display(description="last fire", ordering="last_fired_at")
    def last_fire(self, obj: Schedule) -> str:
        return _short(obj.last_fired_at, obj.timezone)

    @admin.display(description="last run")
    def last_run(self, obj: Schedule) -> SafeString | str:
        """In the list: the run's status, linked to it."""
        return _last_run(obj, detailed=False)

    @admin.display(description="last run")
    def last_run_detail(self, obj: Schedule) -> SafeString | str:
        """On the detail page: the run's id, linked, and its status."""
        return _last_run(obj, detailed=True)

    @admin.display(description="next fire times")
    def next_fire_times(self, obj: Schedule) -> SafeString | str:
        if not (obj.enabled and obj.paused_reason is None):
            return "none while it is not active"
        fires = next_fire_times(
            obj.schedule_name, obj.upcoming, obj.jitter_seconds, limit=SHOWN_FIRES, using=database_of(obj)
        )
        if not fires:
            return "none planned yet (the next scheduler pass plans them)"
        return format_html(
            '<ol class="pgflow-next-fires">{}</ol>',
            format_html_join("", "<li>{}</li>", ((_local(fire, obj.timezone),) for fire in fires)),
        )

    @admin.display(description="recent ticks")
    def recent_ticks_table(self, obj: Schedule) -> SafeString | str:
        database = database_of(obj)
        ticks = recent_ticks(obj.schedule_name, limit=SHOWN_TICKS, using=database)
        if not ticks:
            return "no tick fired yet"
        statuses = run_statuses((tick.run_id for tick in ticks), using=database)
        rows = []
        for tick in ticks:
            status = statuses.get(tick.run_id)
            run = (
                format_html(
                    '<a href="{}">{}</a>', reverse("admin:pgflow_run_change", args=[tick.run_id]), tick.run_id
                )
                if status is not None
                else format_html("{} (pruned)", tick.run_id)
            )
            fired = _local(tick.fired_at, obj.timezone)
            rows.append((_local(tick.tick, obj.timezone), tick.kind, run, status or "-", fired))
        head = format_html_join("", "<th>{}</th>", ((h,) for h in ("tick", "kind", "run", "status", "fired")))
        body = format_html_join(
            "", "<tr>{}</tr>", ((format_html_join("", "<td>{}</td>", ((c,) for c in row)),) for row in rows)
        )
        return format_html(
            '<table class="pgflow-schedule-ticks"><thead><tr>{}</tr></thead><tbody>{}</tbody></table>',
            head,
            body,
        )

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        context = dict(extra_context or {})
        obj = self.get_object(request, unquote(object_id))
        if obj is not None and self.has_operate_permission(request):
            context["schedule_operations"] = {
                "url": reverse("admin:pgflow_schedule_operate", args=[object_id]),
                "paused": obj.paused_reason is not None,
                "resumable": obj.paused_reason == "operator",
            }
        return super().change_view(request, object_id, form_url, context)

    def get_urls(self) -> list[URLPattern]:
        view = self.admin_site.admin_view(self.operate_view)
        return [path("<path:object_id>/operate/", view, name="pgflow_schedule_operate"), *super().get_urls()]

    def operate_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """The detail page's buttons: POST ``operation`` = pause (with ``reason``), resume or trigger."""
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        if not self.has_operate_permission(request):
            raise PermissionDenied
        name = unquote(object_id)
        obj = self.get_object(request, name)
        if obj is None:
            self.message_user(request, f"No schedule named {name!r}.", messages.WARNING)
            return HttpResponseRedirect(reverse("admin:pgflow_schedule_changelist"))
        operation = request.POST.get("operation", "")
        call = self._operations().get(operation)
        if call is None:
            self.message_user(request, f"Unknown operation {operation!r}.", messages.ERROR)
        else:
            self._operate(request, obj, call, request.POST.get("reason", "").strip() or None)
        return HttpResponseRedirect(reverse("admin:pgflow_schedule_change", args=[object_id]))

    def _operations(self) -> dict[str, Callable[[str, str | None], str]]:
        """The operations, on the database the admin writes to (its state read there too)."""
        database = write_database()

        def pause(name: str, reason: str | None) -> str:
            if get_schedule(name, using=database).paused_reason is not None:
                return f"Schedule {name} was already paused; kept its pause."
            pause_schedule(name, detail=reason, using=database)
            return f"Paused schedule {name}" + (f": {reason}." if reason else ".")

        def resume(name: str, reason: str | None) -> str:
            if get_schedule(name, using=database).paused_reason is None:
                return f"Schedule {name} is not paused."
            resume_schedule(name, using=database)
            return f"Resumed schedule {name}; ticks missed while paused do not fire."

        def trigger(name: str, reason: str | None) -> str:
            return f"Triggered schedule {name}: run {trigger_now(name, using=database)}."

        return {"pause": pause, "resume": resume, "trigger": trigger}

    def _operate(
        self, request: HttpRequest, obj: Schedule, call: Callable[[str, str | None], str], reason: str | None
    ) -> bool:
        try:
            text = call(obj.schedule_name, reason)
        except _ERRORS as error:
            self.message_user(request, f"Schedule {obj.schedule_name}: {error}", messages.ERROR)
            return False
        self.log_change(request, obj, text)
        self.message_user(request, text, messages.SUCCESS)
        return True

    def _act_on(self, request: HttpRequest, queryset: QuerySet[Schedule], operation: str) -> None:
        call = self._operations()[operation]
        for obj in queryset.order_by("schedule_name"):
            self._operate(request, obj, call, None)

    @admin.action(description="Pause selected schedules", permissions=["operate"])
    def pause_schedules(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> None:
        self._act_on(request, queryset, "pause")

    @admin.action(description="Resume selected schedules", permissions=["operate"])
    def resume_schedules(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> None:
        self._act_on(request, queryset, "resume")

    @admin.action(description="Trigger selected schedules now", permissions=["operate"])
    def trigger_schedules(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> None:
        self._act_on(request, queryset, "trigger")
