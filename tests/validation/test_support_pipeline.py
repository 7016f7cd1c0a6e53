"""The support-thread application (testproject/example/support.py) run three ways: plain (in process,
through the worker's own code), step-queued and hand-written isolation (support_manual.py) on real
workers; the same domain outcome each time, and acknowledgement independent of a classification
backlog only where queues are separate (real workers, side by side).

No timing thresholds: the starvation tests compare database states at the moment the probe thread
is acknowledged.
"""

from __future__ import annotations

import pytest

from pgflow_django import wait_for_run
from pgflow_django.flows.compiler import compile_flow
from pgflow_django.testing import drain
from testproject.example.models import SupportThread
from testproject.example.support import open_thread, support_thread, support_thread_steps
from testproject.example.support_manual import open_thread_manual
from tests.sql.support import q, val
from tests.workers import Spawner, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

THREADS = [
    ("refund please", ["I was charged twice", "please refund the invoice"], "billing"),
    ("app crash", ["the app shows an error", "then it crashes"], "engineering"),
    ("hello", ["just saying hi"], "general"),
]


def _routed(thread_ids: list[int]) -> dict[int, str]:
    return dict(
        SupportThread.objects.filter(pk__in=thread_ids, routed_at__isnull=False).values_list("pk", "team")
    )


def _expect_routed(thread_ids: list[int]) -> None:
    wait_until(lambda: len(_routed(thread_ids)) == len(thread_ids), 60, "every thread routed")
    assert _routed(thread_ids) == {tid: team for tid, (_, _, team) in zip(thread_ids, THREADS, strict=True)}
    assert SupportThread.objects.filter(pk__in=thread_ids, acknowledged_at__isnull=True).count() == 0


def test_plain_flow_routes_every_thread(support_data: None) -> None:
    """In process (``drain``: the worker's claim, handlers and completions): the outcome is the flow's."""
    compile_flow(support_thread)
    started = [open_thread(subject, messages, flow=support_thread) for subject, messages, _ in THREADS]
    assert drain(flows=[support_thread]).runs == {run_id: "completed" for _, run_id in started}
    _expect_routed([tid for tid, _ in started])
    assert {
        r["queue_name"]
        for r in q("select queue_name from pgflow.step_tasks where flow_slug = 'support_thread'")
    } == {"support_thread"}


def test_step_queued_flow_routes_every_thread_with_a_worker_per_step(
    support: Spawner,
) -> None:
    for step in support_thread_steps.steps:
        support("support_thread_steps", "--step", step, "--concurrency", "4")
    started = [open_thread(subject, messages) for subject, messages, _ in THREADS]
    for _, run_id in started:
        assert wait_for_run(run_id, timeout=60).status == "completed"
    _expect_routed([tid for tid, _ in started])
    by_step = q(
        "select step_slug, array_agg(distinct queue_name) as queues from pgflow.step_tasks "
        "where flow_slug = 'support_thread_steps' group by step_slug order by step_slug"
    )
    assert {row["step_slug"]: row["queues"] for row in by_step} == {
        step: [queue] for step, queue in support_thread_steps.step_queues.items()
    }


def test_hand_written_isolation_routes_every_thread_once(support: Spawner) -> None:
    for flow in ("support_ack", "support_classify", "support_route"):
        support(flow, "--concurrency", "4")
    started = [open_thread_manual(subject, messages) for subject, messages, _ in THREADS]
    _expect_routed([tid for tid, _ in started])
    wait_until(
        lambda: (
            val("select count(*) from pgflow.runs where flow_slug = 'support_route' and status = 'completed'")
            == len(THREADS)
        ),
        60,
        "every routing run completed",
    )
    assert val("select count(*) from pgflow.runs where flow_slug = 'support_route'") == len(THREADS)


def _backlog(flow_slug: str, thread_id: int) -> dict[str, int]:
    """Classify tasks of the backlog thread by status."""
    rows = q(
        "select t.status, count(*) as n from pgflow.step_tasks as t join pgflow.runs as r using (run_id) "
        "where t.flow_slug = %s and t.step_slug = 'classify' and (r.input->>'thread_id')::bigint = %s "
        "group by t.status",
        [flow_slug, thread_id],
    )
    return {row["status"]: row["n"] for row in rows}


def _acknowledged(thread_id: int) -> bool:
    return SupportThread.objects.filter(pk=thread_id, acknowledged_at__isnull=False).exists()


def test_step_queues_acknowledge_while_a_classification_backlog_is_pending(
    support: Spawner,
) -> None:
    """One slow classify worker holds a backlog; the probe thread is acknowledged before it drains."""
    support("support_thread_steps", "--step", "classify", "--concurrency", "1", "--batch-size", "1")
    for step in ("acknowledge", "messages"):
        support("support_thread_steps", "--step", step)
    backlog_id, _ = open_thread("bulk import", [f"message {n}" for n in range(150)], work_ms=20)
    wait_until(
        lambda: sum(_backlog("support_thread_steps", backlog_id).values()) == 150, 30, "the backlog queued"
    )

    probe_id, _ = open_thread("urgent", ["login fails"])
    wait_until(lambda: _acknowledged(probe_id), 30, "the probe thread acknowledged")
    pending = _backlog("support_thread_steps", backlog_id)
    assert pending.get("queued", 0) > 0, f"the backlog had drained before the acknowledgement: {pending}"


def test_one_queue_acknowledges_only_after_the_backlog_ahead_of_it(
    support: Spawner,
) -> None:
    """The same load on the plain flow with one worker: the probe's acknowledgement is behind every
    classification queued before it (one FIFO queue)."""
    support("support_thread", "--concurrency", "1", "--batch-size", "1")
    backlog_id, _ = open_thread(
        "bulk import", [f"message {n}" for n in range(40)], flow=support_thread, work_ms=20
    )
    wait_until(lambda: sum(_backlog("support_thread", backlog_id).values()) == 40, 30, "the backlog queued")

    probe_id, _ = open_thread("urgent", ["login fails"], flow=support_thread)
    wait_until(lambda: _acknowledged(probe_id), 60, "the probe thread acknowledged")
    assert _backlog("support_thread", backlog_id) == {"completed": 40}
