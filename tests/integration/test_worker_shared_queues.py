"""Shared-queue workers (``pgflow_worker --queue Q --flow A --flow B``) on real processes: grouped steps,
two versions of one flow on the same queues, an incomplete registry that leaves unsupported work
untouched, and start-up refusals that each fit one line."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.db import connection

from pgflow_django import start_flow, wait_for_run
from testproject.example.support import open_thread, support_routed, support_routed_v2
from tests.ledger import assert_invariants
from tests.sql.support import q, val
from tests.workers import Spawner, drop_shared_queues, run_manage, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

ROUTED = ("support_routed", "support_routed_v2")


def _clean() -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            "select pgflow.delete_flow_and_data(flow_slug) from pgflow.flows where flow_slug = any(%s)",
            [list(ROUTED)],
        )
        cursor.execute("delete from pgflow.workers where queue_name in ('support_fast', 'support_bulk')")
        drop_shared_queues(cursor, ["support_fast", "support_bulk"])
        cursor.execute("delete from example_supportthread")


@pytest.fixture
def shared(spawn_worker: Spawner) -> Iterator[Spawner]:
    _clean()
    yield spawn_worker
    spawn_worker.stop_all()
    _clean()


def _both(queue: str) -> tuple[str, ...]:
    """Arguments after the spawner's own ``--flow support_routed``."""
    return ("--flow", "support_routed_v2", "--queue", queue)


def test_two_versions_share_two_worker_pools(shared: Spawner) -> None:
    fast = shared("support_routed", *_both("support_fast"))
    shared("support_routed", *_both("support_bulk"))
    assert (
        "queue=support_fast supports support_routed.acknowledge, support_routed.route, "
        "support_routed_v2.acknowledge, support_routed_v2.route"
    ) in fast.log()
    runs = [
        open_thread("refund", ["please refund"], flow=support_routed)[1],
        open_thread("crash", ["an error", "a crash"], flow=support_routed_v2)[1],
    ]
    outputs = [wait_for_run(run_id, timeout=60) for run_id in runs]
    assert [run.status for run in outputs] == ["completed", "completed"]
    assert [run.output["route"]["team"] for run in outputs] == ["billing", "engineering"]
    queues = q(
        "select flow_slug, step_slug, queue_name from pgflow.step_tasks where run_id = any(%s) "
        "group by flow_slug, step_slug, queue_name order by flow_slug, step_slug",
        [runs],
    )
    assert {(r["step_slug"], r["queue_name"]) for r in queues} == {
        ("acknowledge", "support_fast"),
        ("messages", "support_bulk"),
        ("classify", "support_bulk"),
        ("route", "support_fast"),
    }
    support = q(
        "select s.flow_slug, s.step_slug from pgflow.worker_support as s "
        "join pgflow.workers as w using (worker_id) "
        "where w.queue_name = 'support_bulk' and w.stopped_at is null order by 1, 2"
    )
    assert [(r["flow_slug"], r["step_slug"]) for r in support] == [
        ("support_routed", "classify"),
        ("support_routed", "messages"),
        ("support_routed_v2", "classify"),
        ("support_routed_v2", "messages"),
    ]
    with connection.cursor() as cursor:
        assert_invariants(cursor)


def test_an_incomplete_registry_leaves_the_other_versions_work_untouched(shared: Spawner) -> None:
    """Workers know only v1: v2's tasks on the same queues are neither claimed nor archived, v1 runs on."""
    fast = shared("support_routed", "--queue", "support_fast")
    shared("support_routed", "--queue", "support_bulk")
    from pgflow_django.flows.compiler import compile_flow

    compile_flow(support_routed_v2)
    orphan = start_flow(support_routed_v2, {"thread_id": 0, "messages": []})
    served = open_thread("refund", ["refund"], flow=support_routed)[1]
    assert wait_for_run(served, timeout=60).status == "completed"
    wanted = "flow support_routed_v2 step acknowledge is not run by this worker"
    wait_until(lambda: wanted in fast.log(), 30, "a warning")
    line = next(line for line in fast.log().splitlines() if wanted in line)
    message_id = val(
        "select message_id from pgflow.step_tasks where run_id = %s and step_slug = 'acknowledge'", [orphan]
    )
    assert f"queue=support_fast msg_ids={message_id}" in line
    task = q(
        "select status, attempts_count from pgflow.step_tasks "
        "where run_id = %s and step_slug = 'acknowledge'",
        [orphan],
    )
    assert task == [{"status": "queued", "attempts_count": 0}]
    assert val("select count(*) from pgmq.q_support_fast where msg_id = %s", [message_id]) == 1
    assert val("select count(*) from pgmq.a_support_fast where msg_id = %s", [message_id]) == 0
    assert fast.process.poll() is None, "the worker keeps running"


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (
            ("--flow", "support_routed", "--exclude-flow", "support_thread"),
            "--exclude-flow narrows a worker serving every flow",
        ),
        (
            ("--flow", "support_routed", "--queue", "nope"),
            "uses queue 'nope'; choose --queue from: support_bulk, support_fast",
        ),
        (("--flow", "support_routed", "--flow", "support_routed", "--queue", "support_fast"), "given twice"),
        (
            ("--flow", "support_thread", "--queue", "support_fast"),
            "is not routed to shared queues (flow mode)",
        ),
        (("--flow", "support_routed", "--queue", "support_fast", "--exclude-queue", "x"), "serves one"),
        (
            ("--flow", "support_routed", "--queue", "support_fast", "--step", "route"),
            "a --queue or --tasks worker takes no --step",
        ),
    ],
)
def test_start_up_refusals_are_one_line(database_url: str, args: tuple[str, ...], expected: str) -> None:
    _clean()
    result = run_manage(database_url, "pgflow_worker", *args)
    assert result.returncode == 1, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and expected in lines[0], result.stderr
    assert (
        val("select count(*) from pgflow.workers where queue_name in ('support_fast', 'support_bulk')") == 0
    )
