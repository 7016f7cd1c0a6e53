"""Checks that run before a worker registers or polls, each failing with one actionable line."""

from __future__ import annotations

from django.db import DatabaseError, connections

from pgflow_django.db.connect import first_line
from pgflow_django.db.query import fetch_all, fetch_value
from pgflow_django.flows.dsl import Flow, RoutedFlow
from pgflow_django.worker import queries

PROTOCOL_VERSION = 4
"""The worker/database protocol this worker speaks; ``pgflow.protocol_version()`` must return the same."""

REQUIRED_FUNCTIONS: tuple[str, ...] = (
    "pgflow.protocol_version()",
    "pgflow.compile_flow_version(text,jsonb,text,text,bigint)",
    "pgflow.start_tasks(text,text,bigint[],uuid,text)",
    "pgflow.start_shared_tasks(text,bigint[],uuid,text[],text[])",
    "pgflow.subscription_pause(text,text)",
    "pgflow.complete_tasks(jsonb)",
    "pgflow.complete_task(uuid,text,integer,integer,jsonb)",
    "pgflow.fail_task(uuid,text,integer,integer,text,integer)",
    "pgflow.requeue_stalled_tasks()",
    "pgflow.create_history_partitions(timestamptz,timestamptz)",
    "pgflow.release_tasks(jsonb)",
    "pgflow.fire_due_schedules(timestamptz,integer,jsonb,interval)",
    "pgflow.plan_schedules(jsonb)",
    "pgflow.write_queue_access(text,boolean)",
    "pgmq.read(text,integer,integer,jsonb)",
)
"""Every SQL entry point the worker calls (the claim runs ``pgmq.read``'s statement on the queue
table itself); probing them tells "not migrated" apart from a bug."""


class PreflightError(Exception):
    """The worker cannot start; the message says why and what to do."""


def resolve_flow(slug: str) -> Flow:
    from pgflow_django.flows.registry import FlowNotRegistered, get_flow

    try:
        return get_flow(slug)
    except FlowNotRegistered as exc:
        raise PreflightError(str(exc)) from None


def resolve_subscription(flow: Flow, step_slug: str | None) -> str:
    """The queue a worker for ``flow`` (and ``step_slug``) polls; --step is required exactly for
    step-queued flows, and every error lists the valid choices."""
    steps = ", ".join(flow.steps) or "none"
    if isinstance(flow, RoutedFlow):
        raise PreflightError(
            f"flow {flow.slug!r} is routed to shared queues: run it with --queue Q --flow {flow.slug} "
            f"(its queues: {', '.join(flow.queues)})"
        )
    if flow.queue_mode == "step":
        if not step_slug:
            raise PreflightError(
                f"flow {flow.slug!r} is step-queued: each step has its own queue and workers; pass "
                f"--step with one of: {steps}"
            )
        if step_slug not in flow.steps:
            raise PreflightError(f"flow {flow.slug!r} has no step {step_slug!r}; choose --step from: {steps}")
        return flow.queue_for(step_slug)
    if step_slug:
        raise PreflightError(
            f"flow {flow.slug!r} is a plain flow: one queue {flow.slug.lower()!r} serves all its steps "
            f"({steps}), so drop --step; for a worker per step, deploy with_step_queues(flow) under a "
            "new slug"
        )
    return flow.slug.lower()


def check_shared_subscription(flows: list[Flow], queue: str) -> None:
    """A shared-queue worker's flows: distinct concrete slugs, all routed, and ``queue`` used by at
    least one of their routes; every error lists the valid choices."""
    seen: set[str] = set()
    for flow in flows:
        if flow.slug in seen:
            raise PreflightError(f"--flow {flow.slug} is given twice; list each concrete flow once")
        seen.add(flow.slug)
        if not isinstance(flow, RoutedFlow):
            raise PreflightError(
                f"flow {flow.slug!r} is not routed to shared queues ({flow.queue_mode} mode): run it with "
                f"--flow {flow.slug} alone" + (" --step S" if flow.queue_mode == "step" else "")
            )
    used = sorted({name for flow in flows if isinstance(flow, RoutedFlow) for name in flow.queues})
    if queue not in used:
        raise PreflightError(
            f"no route of {', '.join(flow.slug for flow in flows)} uses queue {queue!r}; "
            f"choose --queue from: {', '.join(used)}"
        )


def check_database(using: str = "default") -> None:
    """The database answers and is migrated far enough for this worker."""
    try:
        with connections[using].cursor() as cursor:
            missing = [
                row.signature
                for row in fetch_all(cursor, queries.MISSING_FUNCTIONS, [list(REQUIRED_FUNCTIONS)])
            ]
            protocol = None
            if "pgflow.protocol_version()" not in missing:
                version = fetch_value(cursor, queries.PROTOCOL_VERSION)
                protocol = None if version is None else int(version)
            has_workers = bool(fetch_value(cursor, queries.HAS_WORKERS_TABLE))
    except DatabaseError as exc:
        raise PreflightError(f"cannot reach the database {using!r}: {first_line(exc)}") from None
    if missing or not has_workers:
        absent = missing + ([] if has_workers else ["pgflow.workers"])
        what = (
            "no pgflow schema"
            if len(absent) == len(REQUIRED_FUNCTIONS) + 1
            else "missing "
            + ", ".join(absent[:3])
            + (f" and {len(absent) - 3} more" if len(absent) > 3 else "")
        )
        raise PreflightError(f"the database is not migrated for pgflow ({what}); run manage.py migrate")
    if protocol is not None and protocol < PROTOCOL_VERSION:
        raise PreflightError(
            f"the database speaks pgflow protocol {protocol}, this worker needs {PROTOCOL_VERSION}; "
            "run manage.py migrate"
        )
    if protocol is not None and protocol > PROTOCOL_VERSION:
        raise PreflightError(
            f"the database speaks pgflow protocol {protocol}, this worker only {PROTOCOL_VERSION}; "
            "deploy the new worker code (upgrades are coordinated, not rolling)"
        )
    pending = pending_migrations(using)
    if pending:
        raise PreflightError(
            f"the database is not migrated for pgflow (pending: {', '.join(pending)}); run manage.py migrate"
        )


def pending_migrations(using: str = "default") -> list[str]:
    """Unapplied migrations of this app: newer worker code may rely on any of them."""
    from django.db.migrations.executor import MigrationExecutor

    executor = MigrationExecutor(connections[using])
    targets = [key for key in executor.loader.graph.leaf_nodes() if key[0] == "pgflow"]
    plan = executor.migration_plan(targets)
    return [f"{migration.app_label}.{migration.name}" for migration, backwards in plan if not backwards]
