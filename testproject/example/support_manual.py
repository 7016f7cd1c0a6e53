"""The support pipeline of ``support.py`` with the same isolation but without per-step queues.

What an application writes when one flow has one queue: the latency-sensitive part becomes its own
flow (its own queue and workers), and the application joins the parts itself. The domain row records
which parts finished; whichever part finishes last, holding the row's lock inside its completion
transaction, starts the routing flow, so routing starts exactly once however the parts interleave or
retry. ``support.py`` gets the same behaviour from ``with_step_queues(...)``: this module is the code
that line removes (docs/validation.md counts it).
"""

from __future__ import annotations

import uuid
from typing import Any

from django.db import transaction
from django.utils import timezone

from pgflow_django import Flow, start_flow
from pgflow_django.worker import TaskContext
from testproject.example.support import choose_team, label_message

support_ack = Flow("support_ack", max_attempts=3, timeout=30)
support_classify = Flow("support_classify", max_attempts=3, timeout=30)
support_route = Flow("support_route", max_attempts=3, timeout=30)


@support_ack.step(slug="acknowledge", atomic=True)
def manual_acknowledge(thread: dict[str, Any]) -> dict[str, bool]:
    from testproject.example.models import SupportThread

    row = SupportThread.objects.select_for_update().get(pk=thread["thread_id"])
    first = row.acknowledged_at is None
    if first:
        row.acknowledged_at = timezone.now()
        row.save(update_fields=["acknowledged_at"])
    _route_when_both_done(row)
    return {"acknowledged": first}


@support_classify.step(slug="messages")
def manual_messages(thread: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {"index": index, "text": text, "work_ms": thread.get("work_ms", 0)}
        for index, text in enumerate(thread["messages"])
    ]


@support_classify.map(slug="classify", array=manual_messages)
def manual_classify(message: dict[str, Any]) -> dict[str, Any]:
    return label_message(message)


@support_classify.step(slug="collect", depends_on=[manual_classify], atomic=True)
def manual_collect(deps: dict[str, Any], ctx: TaskContext) -> dict[str, Any]:
    """Store the labels on the domain row (the routing flow cannot see this flow's outputs)."""
    from testproject.example.models import SupportThread

    labels, team = choose_team(deps["classify"])
    row = SupportThread.objects.select_for_update().get(pk=ctx.flow_input["thread_id"])
    row.labels = labels
    row.team = team
    row.classify_done = True
    row.save(update_fields=["labels", "team", "classify_done"])
    _route_when_both_done(row)
    return {"labels": labels}


@support_route.step(slug="route", atomic=True)
def manual_route(thread: dict[str, Any]) -> dict[str, Any]:
    from testproject.example.models import SupportThread

    row = SupportThread.objects.select_for_update().get(pk=thread["thread_id"])
    if row.routed_at is None:
        row.routed_at = timezone.now()
        row.save(update_fields=["routed_at"])
    return {"team": row.team, "labels": row.labels}


def _route_when_both_done(row: Any) -> None:
    """Called with the row locked by each part as it completes: the second one starts the routing.

    Each caller runs inside its completion transaction, so a stale attempt rolls the start back too.
    """
    if row.acknowledged_at is not None and row.classify_done:
        start_flow(support_route, {"thread_id": row.pk}, run_id=_route_run_id(row.pk))


def _route_run_id(thread_id: int) -> uuid.UUID:
    """One routing run per thread: a deterministic id turns a second start into a duplicate-key error
    instead of a second routing, should both parts ever see the other finished."""
    return uuid.uuid5(uuid.NAMESPACE_URL, f"support-route:{thread_id}")


def open_thread_manual(subject: str, messages: list[str], *, work_ms: int = 0) -> tuple[int, list[uuid.UUID]]:
    """Create the thread and start both parts in one transaction."""
    from testproject.example.models import SupportThread

    with transaction.atomic():
        thread = SupportThread.objects.create(subject=subject, messages=messages)
        body = {"thread_id": thread.pk, "messages": messages, "work_ms": work_ms}
        runs = [start_flow(support_ack, body), start_flow(support_classify, body)]
    return thread.pk, runs
