"""Maintenance operations: stalled-task recovery, pruning, deleting a flow.

Each is one call of the SQL API on Django's connection, so it can be run from a command, a cron job, a
Celery beat task or a test alike, and joins the caller's transaction when there is one.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import timedelta

from django.db import connections, transaction

from pgflow_django.conf import get_settings
from pgflow_django.slugs import validate_flow_slug


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
    """Recover tasks whose worker vanished (``pgflow.requeue_stalled_tasks``); workers also do this."""
    with connections[using].cursor() as cursor:
        cursor.execute("select outcome, task_count from pgflow.requeue_stalled_tasks()")
        counts = {outcome: int(count) for outcome, count in cursor.fetchall()}
    return RequeueResult(
        requeued=counts.get("requeued", 0), permanently_stalled=counts.get("permanently_stalled", 0)
    )


def prune(older_than: timedelta, *, using: str = "default") -> PruneResult:
    """Delete runs that finished more than ``older_than`` ago, with their tasks, old archive rows and
    long-silent workers; runs still going are never touched."""
    if older_than < timedelta(0):
        raise ValueError(f"older_than must not be negative, got {older_than}")
    with connections[using].cursor() as cursor:
        cursor.execute(
            "select pgflow.prune_data_older_than(make_interval(secs => %s))::text",
            [older_than.total_seconds()],
        )
        counts: dict[str, int] = json.loads(cursor.fetchone()[0])
    return PruneResult(
        runs=int(counts.get("runs", 0)),
        step_states=int(counts.get("step_states", 0)),
        step_tasks=int(counts.get("step_tasks", 0)),
        workers=int(counts.get("workers", 0)),
        archived_messages=int(counts.get("archived_messages", 0)),
    )


def prune_shared_archive(queue: str, older_than: timedelta, *, using: str = "default") -> int:
    """Queue-wide retention of a declared shared queue's archive (several flows' messages meet there, so
    ``prune`` leaves it alone); returns how many archived messages were deleted."""
    if older_than < timedelta(0):
        raise ValueError(f"older_than must not be negative, got {older_than}")
    with connections[using].cursor() as cursor:
        cursor.execute(
            "select pgflow.prune_shared_archive(%s, make_interval(secs => %s))",
            [queue, older_than.total_seconds()],
        )
        return int(cursor.fetchone()[0])


def describe_flow(slug: str, *, using: str = "default") -> FlowSummary:
    """Counts shown before a deletion is confirmed; ``FlowNotFound`` when the flow is not compiled."""
    validate_flow_slug(slug)
    live_after = 3 * get_settings().worker_heartbeat_seconds
    with connections[using].cursor() as cursor:
        cursor.execute(
            """
            select exists (select 1 from pgflow.flows where flow_slug = %(slug)s),
                   (select count(*) from pgflow.runs where flow_slug = %(slug)s),
                   (select count(*) from pgflow.runs where flow_slug = %(slug)s and status = 'started'),
                   (select count(*) from pgflow.workers as w
                     where w.stopped_at is null and w.deprecated_at is null
                       and w.last_heartbeat_at > now() - make_interval(secs => %(live_after)s)
                       and exists (select 1 from pgflow.worker_support as s
                                    where s.worker_id = w.worker_id and s.flow_slug = %(slug)s)),
                   (select coalesce(array_agg(distinct s.queue_name order by s.queue_name), '{}')
                      from pgflow.steps as s
                      join pgflow.shared_queues as sq on sq.queue_name = s.queue_name
                     where s.flow_slug = %(slug)s)
            """,
            {"slug": slug, "live_after": live_after},
        )
        exists, runs, active, workers, shared = cursor.fetchone()
    if not exists:
        raise FlowNotFound(_not_found(slug, using))
    return FlowSummary(
        flow_slug=slug,
        runs=int(runs),
        active_runs=int(active),
        live_workers=int(workers),
        shared_queues=tuple(shared),
    )


def delete_flow(slug: str, *, using: str = "default") -> FlowSummary:
    """Delete a compiled flow with all its runs and tasks, and its private queues (a routed flow's
    shared queues stay, without its messages); returns what was deleted."""
    with transaction.atomic(using=using):
        summary = describe_flow(slug, using=using)
        with connections[using].cursor() as cursor:
            cursor.execute("select pgflow.delete_flow_and_data(%s)", [slug])
    return summary


def _not_found(slug: str, using: str) -> str:
    with connections[using].cursor() as cursor:
        cursor.execute("select flow_slug from pgflow.flows order by flow_slug")
        known = [row[0] for row in cursor.fetchall()]
    return f"no flow {slug!r} in the database (compiled flows: {', '.join(known) or 'none'})"


@dataclass(frozen=True)
class Pause:
    """A paused worker subscription (``step_slug`` is '' for a whole flow)."""

    flow_slug: str
    step_slug: str
    queue_name: str
    reason: str
    detail: str | None


def pause(flow_slug: str, step_slug: str = "", *, detail: str | None = None, using: str = "default") -> Pause:
    """Set an operator pause: the subscription's workers stop at their next heartbeat and new ones
    refuse to start until :func:`resume`. A fatal pause already there is kept (its detail matters)."""
    with connections[using].cursor() as cursor:
        cursor.execute(
            "select flow_slug, step_slug, queue_name, reason, detail "
            "from pgflow.pause_subscription(%s, %s, 'operator', %s)",
            [flow_slug, step_slug, detail],
        )
        row = cursor.fetchone()
    assert row is not None
    return Pause(*row)


def resume(flow_slug: str, step_slug: str = "", *, using: str = "default") -> Pause | None:
    """Clear a subscription's pause (fatal or operator); returns the pause that was cleared, if any."""
    with transaction.atomic(using=using), connections[using].cursor() as cursor:
        cursor.execute(
            "select flow_slug, step_slug, queue_name, reason, detail from pgflow.worker_pauses "
            "where flow_slug = %s and step_slug = %s for update",
            [flow_slug, step_slug],
        )
        row = cursor.fetchone()
        cursor.execute("select pgflow.resume_subscription(%s, %s)", [flow_slug, step_slug])
    return None if row is None else Pause(*row)


def pauses(*, using: str = "default") -> list[Pause]:
    """Every paused subscription, oldest first."""
    with connections[using].cursor() as cursor:
        cursor.execute(
            "select flow_slug, step_slug, queue_name, reason, detail "
            "from pgflow.worker_pauses order by paused_at"
        )
        return [Pause(*row) for row in cursor.fetchall()]
