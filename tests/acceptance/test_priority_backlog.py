"""Real workers drain a backlog of mixed priorities in priority order, FIFO within a priority, each
task once (docs/flow-control.md, Priorities: the strict order is the starvation policy).

The backlog (RUNS runs, priorities drawn from PRIORITIES, started one by one) is queued before any
worker runs. WORKERS workers x CONCURRENCY threads with batches of BATCH then claim it. A claim takes
the first visible messages in (priority desc, message id) order; claims that run at the same time
split the head of that order between them, so a task's claim position may differ from its rank by at
most WORKERS x BATCH, never more.
"""

from __future__ import annotations

import random

import pytest

from tests import ledger
from tests.acceptance.faults import Rig, alive
from tests.workers import run_manage

pytestmark = pytest.mark.slow

WORKERS, CONCURRENCY, BATCH, RUNS = 3, 2, 2, 300
PRIORITIES = (-40, 0, 0, 7, 25, 100)


def test_workers_take_a_mixed_backlog_by_priority_then_fifo(rig: Rig) -> None:
    flow, db = ledger.PRIORITY_FLOW, rig.db
    compiled = run_manage(
        db.url, "pgflow_compile", flow, env={"DJANGO_SETTINGS_MODULE": ledger.SETTINGS_MODULE}
    )
    assert compiled.returncode == 0, compiled.stdout + compiled.stderr
    chooser = random.Random(22)
    planned = [chooser.choice(PRIORITIES) for _ in range(RUNS)]
    with db.conn.transaction():
        for n, priority in enumerate(planned):
            db.rows(
                "select run_id from pgflow.start_flow(%s, jsonb_build_object('n', %s::integer), null, null,"
                " %s::integer)",
                [flow, n, priority],
            )

    workers = rig.spawn.many(WORKERS, flow, "--concurrency", str(CONCURRENCY), "--batch-size", str(BATCH))
    db.wait_finished([flow], 120)

    rows = db.rows(
        "select (r.input->>'n')::integer, r.priority, t.message_id, t.attempts_count, t.status,"
        "       (select count(*) from public.ledger_execution as e"
        "         where e.run_id = t.run_id and e.step_slug = t.step_slug) as executions"
        "  from pgflow.step_tasks as t join pgflow.runs as r on r.run_id = t.run_id"
        " where t.flow_slug = %s order by t.started_at, t.message_id",
        [flow],
    )
    assert len(rows) == RUNS, "no task was lost"
    assert {(row[3], row[4], row[5]) for row in rows} == {(1, "completed", 1)}, "each task ran once"
    assert [row[1] for row in sorted(rows)] == planned, "each run kept its priority"

    claimed = [(row[1], row[2]) for row in rows]
    ranked = sorted(claimed, key=lambda item: (-item[0], item[1]))
    rank = {item: position for position, item in enumerate(ranked)}
    worst = max(abs(position - rank[item]) for position, item in enumerate(claimed))
    assert worst <= WORKERS * BATCH, f"a task was claimed {worst} places away from its rank"
    # the order really is by priority: the first claims are all of the top priority, the last of the lowest
    head, tail = claimed[: RUNS // 10], claimed[-RUNS // 10 :]
    assert {priority for priority, _ in head} == {max(planned)}
    assert {priority for priority, _ in tail} == {min(planned)}
    claimers = db.val(
        "select count(distinct last_worker_id) from pgflow.step_tasks where flow_slug = %s", [flow]
    )
    assert claimers == WORKERS, "every worker took part"
    alive(*workers)
    db.check()
