"""Queue coverage: which persisted routes (and live task snapshots) have no live worker to run them.

Before callers switch to a new concrete flow version, every (queue, flow, step) it routes to must have
a live worker that polls that queue *and* runs that step. The check is one plain SQL statement
(:data:`COVERAGE_SQL`, kept in ``pgflow_django.runs.queries`` with the runs API's other statements) so that an
operator can run exactly what ``manage.py pgflow_coverage`` ran: :func:`coverage_sql` renders it with
its two parameters as SQL literals on the first lines (edit them there), and :func:`coverage`
executes that very text.

One row per (queue, flow, step) that is needed:

- every persisted route: each row of ``pgflow.steps`` with the queue its tasks are sent to
  (``in_route`` true);
- every (queue, flow, step) that a live task snapshot (a ``queued`` or ``started`` task's
  ``queue_name``) references but the persisted route does not, e.g. tasks left on an older route
  (``in_route`` false). Such work still needs a worker on the queue its message is in.

A worker counts for a row when it is live (not stopped, not deprecated, heartbeat within the window)
and its ``pgflow.worker_support`` set holds the row's (flow, step) on the row's queue (rows written by
workers older than migration 0038 carry no queue: their worker's ``pgflow.workers.queue_name``). The
query is written per (queue, flow, step) rather than per flow, so several flows, versions or steps
sharing one queue are each checked against their own handlers.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final

from django.db import connections
from psycopg import sql

from pgflow_django.conf import LIVE_HEARTBEATS, live_worker_seconds
from pgflow_django.db.query import fetch_all, fetch_value, read_rows
from pgflow_django.flows.slugs import task_flow_slug, validate_flow_slug, version_of
from pgflow_django.runs import queries
from pgflow_django.runs.operations import FlowNotFound, compiled_flows, not_found
from pgflow_django.runs.queries import RouteCoverage, StepServiceRow

__all__ = [
    "COVERAGE_SQL",
    "LIVE_HEARTBEATS",
    "FlowService",
    "RouteCoverage",
    "any_live_worker",
    "compiled_flow_count",
    "coverage",
    "coverage_sql",
    "flow_service",
    "live_worker_seconds",
    "run_unserved_steps",
    "worker_commands",
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
        validate_flow_slug(version_of(flow))
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
        return read_rows(queries.COVERAGE, cursor.description, cursor.fetchall())


def compiled_flow_count(using: str = "default") -> int:
    with connections[using].cursor() as cursor:
        return int(fetch_value(cursor, queries.COMPILED_FLOW_COUNT))


def _check_flow_exists(flow: str, using: str) -> None:
    """A flow's slug names every version of it (one may remain after version 1 was deleted)."""
    compiled = compiled_flows(using)
    if flow not in compiled and flow not in {version_of(name) for name in compiled}:
        raise FlowNotFound(not_found(flow, using))


# -- whether a flow's work has a live worker: the warnings of schedules and ``pgflow_start --wait`` -----


@dataclass(frozen=True)
class FlowService:
    """The steps of one flow (its persisted route) and whether a live worker runs each, by the rule
    of :func:`coverage`: live, polling the step's queue, and registered for that (flow, step)."""

    flow_slug: str
    steps: tuple[StepServiceRow, ...]
    """Empty when the flow is not compiled (no worker can run it: a worker compiles it at start)."""

    @property
    def unserved(self) -> tuple[StepServiceRow, ...]:
        return tuple(step for step in self.steps if not step.live_workers)

    @property
    def served(self) -> bool:
        return bool(self.steps) and not self.unserved

    def warning(self) -> str | None:
        """``no live worker``, ``no live worker for step S`` or ``... for N of M steps``; None when
        every step has one."""
        unserved = self.unserved
        if self.served:
            return None
        if not self.steps or len(unserved) == len(self.steps):
            return "no live worker"
        if len(unserved) == 1:
            return f"no live worker for step {unserved[0].step_slug}"
        return f"no live worker for {len(unserved)} of {len(self.steps)} steps"


def flow_service(
    flows: Iterable[str], *, using: str = "default", live_seconds: float | None = None
) -> dict[str, FlowService]:
    """Each of ``flows`` with its steps' live workers, in one statement."""
    wanted = sorted(set(flows))
    seconds = live_worker_seconds() if live_seconds is None else float(live_seconds)
    steps: dict[str, list[StepServiceRow]] = {slug: [] for slug in wanted}
    if wanted:
        with connections[using].cursor() as cursor:
            params = {"flows": wanted, "live_seconds": seconds}
            for row in fetch_all(cursor, queries.FLOW_SERVICE, params):
                steps[row.flow_slug if row.flow_slug in steps else version_of(row.flow_slug)].append(row)
    return {slug: FlowService(slug, tuple(rows)) for slug, rows in steps.items()}


def run_unserved_steps(
    run_id: Any, *, using: str = "default", live_seconds: float | None = None
) -> list[StepServiceRow]:
    """The steps whose queued or started tasks of one run no live worker would claim: the run waits
    for a worker that is not there."""
    seconds = live_worker_seconds() if live_seconds is None else float(live_seconds)
    with connections[using].cursor() as cursor:
        params = {"run_id": str(run_id), "live_seconds": seconds}
        return fetch_all(cursor, queries.RUN_UNSERVED_STEPS, params)


def any_live_worker(*, using: str = "default", live_seconds: float | None = None) -> bool:
    """Whether any worker is live, whatever it runs (each fires schedules, unless ``--no-scheduler``)."""
    seconds = live_worker_seconds() if live_seconds is None else float(live_seconds)
    with connections[using].cursor() as cursor:
        return bool(fetch_value(cursor, queries.LIVE_WORKER_COUNT, {"live_seconds": seconds}))


def worker_commands(steps: Iterable[StepServiceRow], *, task_path: str | None = None) -> list[str]:
    """The ``manage.py pgflow_worker`` command lines that would run these steps: ``--flow F`` for a
    plain flow, ``--flow F --step S`` per step of a step-queued one, ``--queue Q --flow F`` per shared
    queue of a routed one, and ``--tasks --queue Q`` for a ``@task`` (``task_path``) of the tasks
    backend."""
    commands: list[str] = []
    for step in steps:
        if step.queue_mode == "step":
            command = f"manage.py pgflow_worker --flow {step.flow_slug} --step {step.step_slug}"
        elif (
            step.queue_mode == "routed"
            and task_path
            and task_flow_slug(task_path, step.queue_name) == (step.flow_slug)
        ):
            command = f"manage.py pgflow_worker --tasks --queue {step.queue_name}"
        elif step.queue_mode == "routed":
            command = f"manage.py pgflow_worker --queue {step.queue_name} --flow {step.flow_slug}"
        else:
            command = f"manage.py pgflow_worker --flow {step.flow_slug}"
        if command not in commands:
            commands.append(command)
    return commands
