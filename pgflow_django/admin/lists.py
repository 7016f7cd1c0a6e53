"""Cells and filters of the admin's lists: short ids, times to the second, durations, the default
filters that hide Django task flows and stopped workers until asked for, and the flow filter that
lists the flows of the admin's database."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.contrib import admin
from django.contrib.admin.views.main import ChangeList
from django.db import connections
from django.db.models import Exists, F, Field, OuterRef, QuerySet, Subquery
from django.db.models.functions import Coalesce
from django.http import HttpRequest
from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString

from pgflow_django.admin.database import read_database
from pgflow_django.admin.diagrams.dag import elapsed
from pgflow_django.flows import task_names
from pgflow_django.flows.slugs import TASK_FLOW_SLUG_REGEX, TASK_STEP_SLUG
from pgflow_django.models import Flow, Step, Worker

if TYPE_CHECKING:
    from django.contrib.admin.filters import _ListFilterChoices
    from django.utils.functional import _StrPromise

SHORT_ID = 8
"""Characters of a UUID shown in a list; the rest stays in the page for hover and copy."""

CSS = "pgflow_django/admin.css"


def short_id(value: uuid.UUID | str | None, href: str = "") -> SafeString | str:
    """The last ``SHORT_ID`` characters of an id; hovering shows all of it, copying copies all of it
    (the head is in the text, collapsed to zero width by ``admin.css``). The tail, because the head of
    a time-ordered (UUIDv7) run id is its start time: runs started in the same minute share it."""
    if value is None:
        return "-"
    text = str(value)
    inner = format_html(
        '<span class="pgflow-id" title="{}"><span class="pgflow-id-rest">{}</span>{}</span>',
        text,
        text[:-SHORT_ID],
        text[-SHORT_ID:],
    )
    return format_html('<a href="{}">{}</a>', href, inner) if href else inner


def when(moment: datetime | None) -> str:
    """A time in the current time zone, to the second."""
    if moment is None:
        return "-"
    return timezone.localtime(moment).strftime("%Y-%m-%d %H:%M:%S")


def clock(moment: datetime | None) -> SafeString | str:
    """A time to the second, without the date when it is today; the full time on hover. A narrow
    column puts the time under the date (``admin.css`` keeps each whole)."""
    if moment is None:
        return "-"
    local = timezone.localtime(moment)
    shown = format_html("<span>{}</span>", f"{local:%H:%M:%S}")
    if local.date() != timezone.localdate():
        shown = format_html("<span>{}</span> {}", f"{local:%Y-%m-%d}", shown)
    return format_html('<time datetime="{}" title="{}">{}</time>', local.isoformat(), when(moment), shown)


def took(start: datetime | None, end: datetime | None) -> str:
    return elapsed(start, end) or "-"


def id_column(field: str, description: str) -> Callable[[Any, Any], SafeString | str]:
    """A list column (a ModelAdmin method) showing the id in ``field`` as :func:`short_id`, sorted by it."""

    @admin.display(description=description, ordering=field)
    def column(model_admin: Any, obj: Any) -> SafeString | str:
        return short_id(getattr(obj, field))

    return column


def time_column(
    description: str, *fields: str, sortable: bool = True
) -> Callable[[Any, Any], SafeString | str]:
    """A list column showing the first of ``fields`` that is set, as :func:`clock`; sorted by the
    first field when ``sortable``."""

    @admin.display(description=description, ordering=fields[0] if sortable else None)
    def column(model_admin: Any, obj: Any) -> SafeString | str:
        return clock(next((moment for moment in (getattr(obj, name) for name in fields) if moment), None))

    return column


def task_priority() -> Coalesce:
    """A task's claim priority, as ``pgflow.start_ready_steps`` sends it: the run's, else its step's
    default, else its flow's (the defaults as they are now)."""
    step = Step.objects.filter(flow_id=OuterRef("flow_id"), step_slug=OuterRef("step_slug"))
    return Coalesce(F("run__priority"), Subquery(step.values("opt_priority")), F("flow__opt_priority"))


def task_flows(queryset: QuerySet[Flow]) -> QuerySet[Flow]:
    """Flows made for Django tasks: one step named ``call`` and a slug ending in a hash."""
    call_step = Step.objects.filter(flow_id=OuterRef("flow_slug"), step_slug=TASK_STEP_SLUG)
    return queryset.filter(Exists(call_step), flow_slug__regex=TASK_FLOW_SLUG_REGEX, queue_mode="routed")


class _DefaultingFilter(admin.SimpleListFilter):
    """A filter whose unselected state is a named default rather than "All"."""

    default_label = ""

    def choices(self, changelist: ChangeList) -> Iterator[_ListFilterChoices]:
        name = str(self.parameter_name)
        yield {
            "selected": self.value() is None,
            "query_string": changelist.get_query_string(remove=[name]),
            "display": self.default_label,
        }
        for lookup, title in self.lookup_choices:
            yield {
                "selected": self.value() == str(lookup),
                "query_string": changelist.get_query_string({name: lookup}),
                "display": title,
            }


class FlowKindFilter(_DefaultingFilter):
    """Django task flows (one per task function and queue) would flood the list: shown on request."""

    title = "kind"
    parameter_name = "kind"
    default_label = "Workflows"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("tasks", "Django task flows"), ("all", "All flows")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if self.value() == "all":
            return queryset
        tasks = task_flows(queryset)
        if self.value() == "tasks":
            return tasks
        return queryset.exclude(flow_slug__in=tasks.values("flow_slug"))


class WorkerStateFilter(_DefaultingFilter):
    """Live workers by default; stopped ones (their rows kept for the record) on request."""

    title = "state"
    parameter_name = "state"
    default_label = "Live"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("stopped", "Stopped"), ("all", "All")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Worker]) -> QuerySet[Worker]:
        if self.value() == "all":
            return queryset
        return queryset.filter(stopped_at__isnull=self.value() != "stopped")


class FlowFilter(admin.RelatedFieldListFilter):
    """The flow filter of runs and tasks, its choices read where the list is (Django's own filter
    reads them from the default database, whichever database the list shows).

    The project's flows come first, by slug; then Django tasks, by function path. A task flow whose
    function no run names is left out: it has nothing to filter, and its hashed slug means nothing."""

    def field_choices(
        self, field: Field[Any, Any], request: HttpRequest, model_admin: Any
    ) -> list[tuple[str, str | _StrPromise]]:
        database = read_database(Flow)
        with connections[database].cursor() as cursor:
            found = task_names.task_flows(cursor)
        tasks = {flow.flow_slug for flow in found}
        slugs = Flow.objects.using(database).order_by("flow_slug").values_list("flow_slug", flat=True)
        labels = task_names.task_labels(found)
        choices: list[tuple[str, str | _StrPromise]] = [(slug, slug) for slug in slugs if slug not in tasks]
        return choices + sorted(labels.items(), key=lambda item: (item[1], item[0]))


def flow_name(run: Any) -> str:
    """A run's flow as the lists show it: a Django task's function path, else the flow slug."""
    return task_names.run_flow_name(run.flow_id, run.input)
