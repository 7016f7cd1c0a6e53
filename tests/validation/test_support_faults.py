"""The step-queued support pipeline under faults and concurrency, on real workers: a step worker
killed mid-handler is recovered by another step's worker (time simulated by back-dating), and
concurrent step workers execute every task once with nothing left behind."""

from __future__ import annotations

import pytest
from django.db import connection

from pgflow_django import wait_for_run
from testproject.example.models import SupportThread
from testproject.example.support import open_thread
from tests.ledger import assert_invariants
from tests.sql.support import q, q1
from tests.workers import Spawner, wait_recovery_passes, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

TIMEOUT = 30
"""support_thread_steps' timeout: stalled recovery takes claims older than TIMEOUT + 30 s."""


def _classify_tasks(run_id: object) -> list[dict[str, object]]:
    return q(
        "select task_index, status, attempts_count from pgflow.step_tasks "
        "where run_id = %s and step_slug = 'classify' order by task_index",
        [run_id],
    )


def test_killed_step_worker_is_recovered_by_another_steps_worker(support: Spawner) -> None:
    doomed = support("support_thread_steps", "--step", "classify", "--concurrency", "1")
    for step in ("acknowledge", "messages"):
        support("support_thread_steps", "--step", step)
    # the route worker also runs stalled recovery, often: recovery is not tied to the stalled step
    route = support(
        "support_thread_steps", "--step", "route", "--stalled-check-seconds", "0.2", "--log-level", "debug"
    )
    thread_id, run_id = open_thread("crash", ["an error appeared"], work_ms=120_000)
    wait_until(
        lambda: _classify_tasks(run_id) == [{"task_index": 0, "status": "started", "attempts_count": 1}],
        30,
        "classify attempt 1 running",
    )
    doomed.kill()

    q(
        "update pgflow.step_tasks set started_at = now() - make_interval(secs => %s) "
        "where run_id = %s and step_slug = 'classify'",
        [TIMEOUT + 25, run_id],
    )
    wait_recovery_passes(route)
    assert _classify_tasks(run_id)[0]["status"] == "started", "not stalled yet: left alone"

    # the slow model call answers quickly this time: attempt 2 reads the map element from the
    # messages step's stored output
    q(
        "update pgflow.step_states set output = jsonb_set(output, '{0,work_ms}', '0') "
        "where run_id = %s and step_slug = 'messages'",
        [run_id],
    )
    q(
        "update pgflow.step_tasks set started_at = now() - make_interval(secs => %s) "
        "where run_id = %s and step_slug = 'classify'",
        [TIMEOUT + 31, run_id],
    )
    wait_until(lambda: _classify_tasks(run_id)[0]["status"] == "queued", 15, "the stalled task requeued")
    support("support_thread_steps", "--step", "classify", "--concurrency", "1")
    run = wait_for_run(run_id, timeout=30)
    assert run.status == "completed"
    assert run.output == {"route": {"team": "engineering", "labels": ["engineering"]}}
    assert _classify_tasks(run_id) == [{"task_index": 0, "status": "completed", "attempts_count": 2}]
    assert q1(
        "select requeued_count from pgflow.step_tasks where run_id = %s and step_slug = 'classify'", [run_id]
    ) == {"requeued_count": 1}
    thread = SupportThread.objects.get(pk=thread_id)
    assert (
        thread.team == "engineering" and thread.routed_at is not None and thread.acknowledged_at is not None
    )
    with connection.cursor() as cursor:
        assert_invariants(cursor)


def test_concurrent_step_workers_run_every_task_once(support: Spawner) -> None:
    for _ in range(3):
        support("support_thread_steps", "--step", "classify", "--concurrency", "4", "--batch-size", "4")
    for step in ("acknowledge", "messages", "route"):
        support("support_thread_steps", "--step", step, "--concurrency", "4")
    threads = [open_thread(f"thread {n}", [f"refund {n}.{m}" for m in range(10)]) for n in range(20)]
    for _, run_id in threads:
        assert wait_for_run(run_id, timeout=60).status == "completed"
    attempts = q(
        "select step_slug, max(attempts_count) as most, min(attempts_count) as least, count(*) as n "
        "from pgflow.step_tasks where flow_slug = 'support_thread_steps' "
        "group by step_slug order by step_slug"
    )
    assert attempts == [
        {"step_slug": "acknowledge", "most": 1, "least": 1, "n": 20},
        {"step_slug": "classify", "most": 1, "least": 1, "n": 200},
        {"step_slug": "messages", "most": 1, "least": 1, "n": 20},
        {"step_slug": "route", "most": 1, "least": 1, "n": 20},
    ]
    routed = SupportThread.objects.filter(pk__in=[tid for tid, _ in threads])
    assert sorted(routed.values_list("team", flat=True)) == ["billing"] * 20
    assert routed.filter(routed_at__isnull=True).count() == 0
    with connection.cursor() as cursor:
        assert_invariants(cursor)
