"""Maintenance operations: stalled-task recovery, pruning, deleting a flow.

Each is one call of the SQL API on Django's connection, so it can be run from a command, a cron job, a
Celery beat task or a test alike, and joins the caller's transaction when there is one.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import timedelta

from django.db import connections, transaction

from pgflow_django.conf import live_worker_seconds
from pgflow_django.db import queries as db_queries
from pgflow_django.db.queries import Pause
from pgflow_django.db.query import fetch_all, fetch_one, fetch_value
from pgflow_django.flows import task_names
from pgflow_django.flows.slugs import validate_flow_slug, version_of
from pgflow_django.runs import queries

__all__ = [
    "FlowNotFound",
    "FlowSummary",
    "Pause",
    "PruneResult",
    "RequeueResult",
    "compiled_flows",
    "default_partition_runs",
    "delete_flow",
    "describe_flow",
    "history_partitioning",
    "not_found",
    "partition_archives",
    "partition_history",
    "pause",
    "pauses",
    "prune",
    "prune_shared_archive",
    "requeue_stalled",
    "resume",
]


class FlowNotFound(LookupError):
    """No compiled flow in the database has this slug."""


@dataclass(frozen=True)
class RequeueResult:
    requeued: int
    """Stalled tasks made visible again for another worker."""
    permanently_stalled: int
    """Tasks that stalled too often (or had no attempts left) and were exhausted instead."""


@dataclass(frozen=True)
class PruneResult:
    runs: int
    step_states: int
    step_tasks: int
    workers: int
    archived_messages: int
    partitions: int = 0
    """History intervals dropped whole (a partitioned install); their runs are counted in ``runs``."""


@dataclass(frozen=True)
class FlowSummary:
    """What deleting a flow would remove, and who still uses it."""

    flow_slug: str
    runs: int
    active_runs: int
    live_workers: int
    shared_queues: tuple[str, ...] = ()
    """The declared shared queues a routed flow's steps use: they stay, only its messages go."""

    @property
    def what_goes(self) -> str:
        """The queue part of a deletion, worded for private queues or shared ones."""
        if not self.shared_queues:
            return "its queue"
        return f"its messages on shared queue(s) {', '.join(self.shared_queues)} (the queues stay)"


def requeue_stalled(*, using: str = "default") -> RequeueResult:
    """Recover tasks whose worker vanished (``pgflow.requeue_stalled_tasks``); workers also do this.

    The workers' own path: it waits for a pass another caller is running to end, then runs under the
    same advisory lock and lock timeout (a row that stays busy raises rather than holding up others)."""
    with transaction.atomic(using=using), connections[using].cursor() as cursor:
        recovered = db_queries.requeue_stalled(cursor, wait=True) or []
    counts = {row.outcome: int(row.task_count) for row in recovered}
    return RequeueResult(
        requeued=counts.get("requeued", 0), permanently_stalled=counts.get("permanently_stalled", 0)
    )


def prune(older_than: timedelta, *, using: str = "default") -> PruneResult:
    """Delete runs that finished more than ``older_than`` ago, with their tasks, old archive rows and
    long-silent workers; runs still going are never touched."""
    if older_than < timedelta(0):
        raise ValueError(f"older_than must not be negative, got {older_than}")
    with connections[using].cursor() as cursor:
        counts: dict[str, int] = json.loads(fetch_value(cursor, queries.PRUNE, [older_than.total_seconds()]))
    return PruneResult(
        runs=int(counts.get("runs", 0)),
        step_states=int(counts.get("step_states", 0)),
        step_tasks=int(counts.get("step_tasks", 0)),
        workers=int(counts.get("workers", 0)),
        archived_messages=int(counts.get("archived_messages", 0)),
        partitions=int(counts.get("partitions", 0)),
    )


def partition_history(interval_days: int, ahead: int, *, apply: bool, using: str = "default") -> list[str]:
    """The statements that partition runs, step_states and step_tasks by run id (one partition per
    ``interval_days``, ``ahead`` future ones kept ready), in order; run in one transaction only when
    ``apply``. Raises ``DatabaseError`` (one line) when the history is already partitioned."""
    with transaction.atomic(using=using), connections[using].cursor() as cursor:
        fetch_value(cursor, db_queries.SET_LOCK_TIMEOUT, [queries.PARTITION_LOCK_TIMEOUT])
        rows = fetch_all(cursor, queries.PARTITION_HISTORY, [interval_days, ahead, apply])
    return [str(row.value) for row in rows]


def partition_archives(*, apply: bool, using: str = "default") -> list[str]:
    """The statements that partition the PGMQ archives of pgflow's queues on a history partitioned
    before they could be, in order; run in one transaction only when ``apply``. Raises
    ``DatabaseError`` (one line) when the history is not partitioned or the archives already are."""
    with transaction.atomic(using=using), connections[using].cursor() as cursor:
        fetch_value(cursor, db_queries.SET_LOCK_TIMEOUT, [queries.PARTITION_LOCK_TIMEOUT])
        rows = fetch_all(cursor, queries.PARTITION_ARCHIVES, [apply])
    return [str(row.value) for row in rows]


def history_partitioning(*, using: str = "default") -> queries.HistoryPartitioning | None:
    """A partitioned install's settings and partition count; None when the history is not partitioned."""
    with connections[using].cursor() as cursor:
        return fetch_one(cursor, queries.HISTORY_PARTITIONING)


def default_partition_runs(*, using: str = "default") -> int:
    """How many runs a partitioned history's default partition holds (counted: a full read of it)."""
    with connections[using].cursor() as cursor:
        return int(fetch_value(cursor, queries.DEFAULT_PARTITION_RUNS))


def prune_shared_archive(queue: str, older_than: timedelta, *, using: str = "default") -> int:
    """Queue-wide retention of a declared shared queue's archive (several flows' messages meet there, so
    ``prune`` leaves it alone); returns how many archived messages were deleted."""
    if older_than < timedelta(0):
        raise ValueError(f"older_than must not be negative, got {older_than}")
    with connections[using].cursor() as cursor:
        return int(fetch_value(cursor, queries.PRUNE_SHARED_ARCHIVE, [queue, older_than.total_seconds()]))


def describe_flow(slug: str, *, using: str = "default") -> FlowSummary:
    """Counts shown before a deletion is confirmed; ``FlowNotFound`` when the flow is not compiled.
    ``slug`` may be one version's stored slug (``orders___v2``)."""
    validate_flow_slug(version_of(slug))
    with connections[using].cursor() as cursor:
        usage = fetch_one(cursor, queries.FLOW_USAGE, {"slug": slug, "live_seconds": live_worker_seconds()})
    assert usage is not None
    if not usage.exists:
        raise FlowNotFound(not_found(slug, using))
    return FlowSummary(
        flow_slug=slug,
        runs=int(usage.runs),
        active_runs=int(usage.active_runs),
        live_workers=int(usage.live_workers),
        shared_queues=tuple(usage.shared_queues),
    )


def delete_flow(slug: str, *, using: str = "default") -> FlowSummary:
    """Delete a compiled flow with all its runs and tasks, and its private queues (a routed flow's
    shared queues stay, without its messages); returns what was deleted."""
    with transaction.atomic(using=using):
        summary = describe_flow(slug, using=using)
        with connections[using].cursor() as cursor:
            fetch_value(cursor, queries.DELETE_FLOW, [slug])
    return summary


def compiled_flows(using: str = "default") -> list[str]:
    """The slugs of every flow compiled in the database, in order."""
    with connections[using].cursor() as cursor:
        return [row.flow_slug for row in fetch_all(cursor, queries.COMPILED_FLOWS)]


def not_found(slug: str, using: str) -> str:
    """The one line naming a flow the database does not have, with the ones it has (Django task flows,
    with their hashed slugs, only when ``slug`` looks like one of theirs), each named once whatever
    its versions."""
    known = list(dict.fromkeys(version_of(name) for name in compiled_flows(using)))
    if not task_names.asks_for_task_flows(slug):
        with connections[using].cursor() as cursor:
            tasks = {flow.flow_slug for flow in task_names.task_flows(cursor)}
        known = [name for name in known if name not in tasks]
    return f"no flow {slug!r} in the database (compiled flows: {', '.join(known) or 'none'})"


def pause(flow_slug: str, step_slug: str = "", *, detail: str | None = None, using: str = "default") -> Pause:
    """Set an operator pause: the subscription's workers stop at their next heartbeat and new ones
    refuse to start until :func:`resume`. A fatal pause already there is kept (its detail matters)."""
    with connections[using].cursor() as cursor:
        paused = fetch_one(cursor, queries.PAUSE_SUBSCRIPTION, [flow_slug, step_slug, detail])
    assert paused is not None
    return paused


def resume(flow_slug: str, step_slug: str = "", *, using: str = "default") -> Pause | None:
    """Clear a subscription's pause (fatal or operator); returns the pause that was cleared, if any."""
    with transaction.atomic(using=using), connections[using].cursor() as cursor:
        cleared = fetch_one(cursor, queries.LOCK_PAUSE, [flow_slug, step_slug])
        fetch_value(cursor, queries.RESUME_SUBSCRIPTION, [flow_slug, step_slug])
    return cleared


def pauses(*, using: str = "default") -> list[Pause]:
    """Every paused subscription, oldest first."""
    with connections[using].cursor() as cursor:
        return fetch_all(cursor, db_queries.ALL_PAUSES)
