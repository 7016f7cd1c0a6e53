"""Queue coverage: which persisted routes (and live task snapshots) have no live worker to run them.

Before callers switch to a new concrete flow version, every (queue, flow, step) it routes to must have
a live worker that polls that queue *and* runs that step. The check is one plain SQL statement
(:data:`COVERAGE_SQL`, kept in ``pgflow_django.queries`` with every other statement) so that an
operator can run exactly what ``manage.py pgflow_coverage`` ran: :func:`coverage_sql` renders it with
its two parameters as SQL literals on the first lines (edit them there), and :func:`coverage`
executes that very text.

One row per (queue, flow, step) that is needed:

- every persisted route: each row of ``pgflow.steps`` with the queue its tasks are sent to
  (``in_route`` true);
- every (queue, flow, step) that a live task snapshot (a ``queued`` or ``started`` task's
  ``queue_name``) references but the persisted route does not, e.g. tasks left on an older route
  (``in_route`` false). Such work still needs a worker on the queue its message is in.

A worker counts for a row when it is live (not stopped, not deprecated, heartbeat within the window),
its ``pgflow.workers.queue_name`` is the row's queue, and its ``pgflow.worker_support`` set holds the
row's (flow, step). The query is written per (queue, flow, step) rather than per flow, so several
flows, versions or steps sharing one queue are each checked against their own handlers.
"""

from __future__ import annotations

from typing import Final

from django.db import connections
from psycopg import sql

from pgflow_django import queries
from pgflow_django.conf import LIVE_HEARTBEATS, live_worker_seconds
from pgflow_django.operations import FlowNotFound, compiled_flows, not_found
from pgflow_django.queries import RouteCoverage
from pgflow_django.slugs import validate_flow_slug

__all__ = [
    "COVERAGE_SQL",
    "LIVE_HEARTBEATS",
    "RouteCoverage",
    "compiled_flow_count",
    "coverage",
    "coverage_sql",
    "live_worker_seconds",
]

COVERAGE_SQL: Final = queries.COVERAGE_SQL
"""The coverage query, with ``{live_seconds}`` and ``{flow}`` placeholders for SQL literals (see
:func:`coverage_sql`). Its columns are the fields of :class:`RouteCoverage`."""


def coverage_sql(
    *, using: str = "default", flow: str | None = None, live_seconds: float | None = None
) -> str:
    """:data:`COVERAGE_SQL` with its parameters as SQL literals: the text to paste into psql.

    ``flow`` is validated as a slug, and checked against the database (``FlowNotFound``); the literals
    are quoted by psycopg for the connection, so the text runs unchanged.
    """
    seconds = live_worker_seconds() if live_seconds is None else float(live_seconds)
    if not 0 < seconds < float("inf"):
        raise ValueError(f"live_seconds must be a number of seconds > 0, got {live_seconds!r}")
    connection = connections[using]
    if flow is not None:
        validate_flow_slug(flow)
        _check_flow_exists(flow, using)
    connection.ensure_connection()
    query = sql.SQL(COVERAGE_SQL).format(live_seconds=sql.Literal(seconds), flow=sql.Literal(flow))
    return query.as_string(connection.connection)


def coverage(
    using: str = "default", flow: str | None = None, live_seconds: float | None = None
) -> list[RouteCoverage]:
    """Every (queue, flow, step) that persisted routes and live tasks need, with its live workers.

    Runs exactly the text :func:`coverage_sql` returns for the same arguments.
    """
    query = coverage_sql(using=using, flow=flow, live_seconds=live_seconds)
    with connections[using].cursor() as cursor:
        cursor.execute(query)
        return queries.read_rows(queries.COVERAGE, cursor.description, cursor.fetchall())


def compiled_flow_count(using: str = "default") -> int:
    with connections[using].cursor() as cursor:
        return int(queries.value(cursor, queries.COMPILED_FLOW_COUNT))


def _check_flow_exists(flow: str, using: str) -> None:
    if flow not in compiled_flows(using):
        raise FlowNotFound(not_found(flow, using))
