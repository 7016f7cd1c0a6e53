"""A support-thread pipeline, deployed two ways from one definition.

    acknowledge   tell the customer the thread arrived: latency-sensitive, the reply must not wait
    messages      the thread's messages, the array ``classify`` maps over
    classify      one task per message (a model call in a real application; here keyword rules and
                  the input's ``work_ms`` of simulated latency)
    route         picks the team from the labels and records it, in the completion's transaction

``support_thread`` is the plain flow: all its tasks share one queue and one worker pool, so a thread
with thousands of messages delays every later thread's acknowledgement. ``support_thread_steps`` is
the same DAG under its own slug with a private queue per step, so ``acknowledge`` has its own workers
(``pgflow_worker --flow support_thread_steps --step acknowledge``) and never waits behind
classification. ``support_manual.py`` shows what an application writes to get that isolation without
per-step queues. ``support_routed`` (and its next version ``support_routed_v2``) group the steps on
two shared queues instead, so two worker pools serve every version.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from typing import Any

from django.db import transaction
from django.utils import timezone

from pgflow_django import Flow, RoutedFlow, StepQueuedFlow, route_flow, start_flow, with_step_queues
from pgflow_django.worker import TaskContext

LABEL_RULES = {
    "refund": "billing",
    "invoice": "billing",
    "charge": "billing",
    "crash": "engineering",
    "error": "engineering",
    "password": "accounts",
    "login": "accounts",
}
"""Keyword -> team: the classification rule the example uses instead of a model."""

support_thread = Flow("support_thread", max_attempts=3, timeout=30)


@support_thread.step()
def acknowledge(thread: dict[str, Any]) -> dict[str, bool]:
    """Mark the thread acknowledged (once: a retried attempt finds it already set)."""
    from testproject.example.models import SupportThread

    updated = SupportThread.objects.filter(pk=thread["thread_id"], acknowledged_at__isnull=True).update(
        acknowledged_at=timezone.now()
    )
    return {"acknowledged": bool(updated)}


@support_thread.step(slug="messages")
def thread_messages(thread: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {"index": index, "text": text, "work_ms": thread.get("work_ms", 0)}
        for index, text in enumerate(thread["messages"])
    ]


@support_thread.map(array=thread_messages)
def classify(message: dict[str, Any]) -> dict[str, Any]:
    return label_message(message)


@support_thread.step(depends_on=[acknowledge, classify], atomic=True)
def route(deps: dict[str, Any], ctx: TaskContext) -> dict[str, Any]:
    """Record the team with the domain row, exactly once: the update commits with the completion."""
    from testproject.example.models import SupportThread

    labels, team = choose_team(deps["classify"])
    SupportThread.objects.filter(pk=ctx.flow_input["thread_id"]).update(
        labels=labels, team=team, routed_at=timezone.now()
    )
    return {"team": team, "labels": labels}


support_thread_steps: StepQueuedFlow = with_step_queues(support_thread.copy(slug="support_thread_steps"))

SUPPORT_QUEUES = {
    "acknowledge": "support_fast",
    "messages": "support_bulk",
    "classify": "support_bulk",
    "route": "support_fast",
}
"""Grouped routing: the quick steps share one queue and its workers, classification has the other."""

support_routed: RoutedFlow = route_flow(support_thread.copy(slug="support_routed"), queues=SUPPORT_QUEUES)
support_routed_v2: RoutedFlow = route_flow(
    support_thread.copy(slug="support_routed_v2"), queues=SUPPORT_QUEUES
)
"""A second concrete version on the same queues: one pair of worker pools serves both while v1 drains."""


def label_message(message: dict[str, Any]) -> dict[str, Any]:
    if message.get("work_ms"):
        time.sleep(message["work_ms"] / 1000)
    text = str(message["text"]).lower()
    labels = sorted({team for word, team in LABEL_RULES.items() if word in text})
    return {"index": message["index"], "labels": labels}


def choose_team(classified: list[dict[str, Any]]) -> tuple[list[str], str]:
    """All labels, and the most frequent one (ties by name) as the team; 'general' when none."""
    counts = Counter(label for item in classified for label in item["labels"])
    team = min(counts, key=lambda label: (-counts[label], label)) if counts else "general"
    return sorted(counts), team


def open_thread(
    subject: str, messages: list[str], *, flow: Flow = support_thread_steps, work_ms: int = 0
) -> tuple[int, uuid.UUID]:
    """Create the thread and start its pipeline in one transaction: both exist, or neither."""
    from testproject.example.models import SupportThread

    with transaction.atomic():
        thread = SupportThread.objects.create(subject=subject, messages=messages)
        run_id = start_flow(flow, {"thread_id": thread.pk, "messages": messages, "work_ms": work_ms})
    return thread.pk, run_id
