"""Slow tasks behind a fast first step, two real workers (issue 35, item 1): a worker never holds a
claimed task that no thread of it runs while the other worker could run it.

Both workers prefetch (``--prefetch 100``). Each run's no-op first step finishes in well under the
5 ms that makes a step short; its map step then makes a dozen tasks ready that each take 0.4 s. A
worker that carried the first step's pace over to the map step would claim them all and leave them
waiting for its two threads. Sampled every 20 ms: claimed tasks whose handler has not begun (the
execution ledger has no row for their attempt) while both threads of their worker run other slow
tasks (recorded less than 0.4 s ago, so still sleeping). That never happens to a task held for a free
thread, however long the machine takes to start its handler; a time since the claim would count a
busy machine's slow start as waiting for a thread.
"""

from __future__ import annotations

import time

import pytest

from tests import ledger
from tests.acceptance.faults import CHAOS, FAST, Rig, alive

pytestmark = pytest.mark.slow

RUNS, ELEMENTS = (4, 12) if CHAOS else (2, 6)
THREADS = 2

HELD = """
select count(*) from pgflow.step_tasks as t
 where t.flow_slug = %(flow)s and t.step_slug = 'slow' and t.status = 'started'
   and not exists (select 1 from public.ledger_execution as e
                    where e.run_id = t.run_id and e.step_slug = t.step_slug
                      and e.task_index = t.task_index and e.attempt = t.attempts_count)
   and (select count(*) from pgflow.step_tasks as u
          join public.ledger_execution as e
            on e.run_id = u.run_id and e.step_slug = u.step_slug
           and e.task_index = u.task_index and e.attempt = u.attempts_count
         where u.flow_slug = t.flow_slug and u.step_slug = 'slow'
           and u.last_worker_id = t.last_worker_id
           and e.at > clock_timestamp() - make_interval(secs => %(running)s)) >= %(threads)s
"""


def test_slow_tasks_behind_a_fast_step_wait_in_the_queue_not_in_a_busy_worker(rig: Rig) -> None:
    flow, db = ledger.FAST_SLOW_FLOW, rig.db
    workers = rig.spawn.many(2, flow, *FAST, "--concurrency", str(THREADS), "--prefetch", "100")
    run_ids = db.start(flow, [{"n": ELEMENTS} for _ in range(RUNS)])
    held: list[int] = []
    deadline = time.monotonic() + 60
    while db.unfinished([flow]) and time.monotonic() < deadline:
        held.append(int(db.val(HELD, {"flow": flow, "running": ledger.SLOW_SECONDS, "threads": THREADS})))
        time.sleep(0.02)
    db.wait_finished([flow], 30)

    assert max(held) == 0, f"claimed tasks waited for a thread: {held}"
    assert db.task_count(run_ids, "completed") == RUNS * (ELEMENTS + 1)
    assert db.executions(run_ids, attempt=2) == 0, "no lease ran out behind a busy thread"
    pids = db.val(
        "select count(distinct worker_pid) from public.ledger_execution where flow_slug = %s", [flow]
    )
    assert pids == 2, "both workers ran the slow tasks"
    alive(*workers)
    db.check()
