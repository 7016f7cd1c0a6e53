"""The database the pgflow admin shows and acts on: ``PGFLOW["ADMIN_DATABASE"]``, read through the
project's database routers.

Actions (cancel, retry, re-run, pause, resume, schedule operations) always write to the
``ADMIN_DATABASE`` alias: an operator's action must change the database the admin manages, never a
replica. Pages, lists, the dashboard and the diagrams read from the alias the project's routers choose
for reading a pgflow model, asked with the hint ``pgflow_database=<ADMIN_DATABASE>`` so one router can
send each pgflow database's reads to its own replica; when no router chooses, from ``ADMIN_DATABASE``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.db import models, router
from django.db.models import QuerySet
from django.http import HttpRequest

from pgflow_django.conf import get_settings
from pgflow_django.models import Run

if TYPE_CHECKING:
    from django.db.models import Model


def write_database() -> str:
    """The alias every admin action writes to."""
    return get_settings().admin_database


def read_database(model: type[Model] = Run) -> str:
    """The alias the admin reads ``model`` from (see the module docstring); raw statements of the
    dashboard and the worker pages ask about ``Run``, the model every pgflow router knows."""
    primary = write_database()
    for each in router.routers:
        choose = getattr(each, "db_for_read", None)
        chosen = choose(model, pgflow_database=primary) if choose is not None else None
        if chosen:
            return str(chosen)
    return primary


def database_of(obj: models.Model) -> str:
    """The alias ``obj`` was read from, for the rows shown beside it (its steps, states, tasks)."""
    return obj._state.db or read_database(type(obj))


class AdminDatabaseMixin:
    """A ModelAdmin whose lists and pages read from :func:`read_database`."""

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        queryset: QuerySet[Any] = super().get_queryset(request)  # type: ignore[misc]
        return queryset.using(read_database(queryset.model))
