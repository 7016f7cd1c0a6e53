"""Direct hand-off on a real worker: the completion that makes the next step ready claims it for the
finishing worker, so that step's message is never read; a worker hands itself no more tasks than it
has free slots (``--prefetch 0``: one per thread), and the rest are read from the queue as usual."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from pgflow_django import start_flow, wait_for_run
from tests.sql.support import q
from tests.workers import WorkerProcess

pytestmark = pytest.mark.django_db(transaction=True)


def messages(run_id: Any, queue: str) -> list[dict[str, Any]]:
    """Each task of the run with its archived message's read count, by step order then index."""
    return q(
        f"select t.step_slug, t.task_index, t.attempts_count, t.last_worker_id::text as worker, a.read_ct "
        f"  from pgflow.step_tasks as t join pgmq.a_{queue} as a on a.msg_id = t.message_id "
        f"  join pgflow.steps as s on s.flow_slug = t.flow_slug and s.step_slug = t.step_slug "
        f" where t.run_id = %s order by s.step_index, t.task_index",
        [run_id],
    )


def test_a_chain_runs_on_one_worker_reading_only_its_first_message(
    spawn_worker: Callable[..., WorkerProcess],
) -> None:
    worker = spawn_worker("example_chain")
    for n in range(3):
        run_id = start_flow("example_chain", {"n": n})
        run = wait_for_run(run_id, timeout=20)
        assert run.status == "completed", run
        rows = messages(run_id, "example_chain")
        assert [(r["step_slug"], r["attempts_count"], r["worker"]) for r in rows] == [
            ("first", 1, worker.worker_id),
            ("second", 1, worker.worker_id),
            ("third", 1, worker.worker_id),
        ]
        assert [r["read_ct"] for r in rows] == [1, 0, 0], "second and third were handed off, never read"


def test_a_worker_hands_itself_no_more_than_its_free_slots(
    spawn_worker: Callable[..., WorkerProcess],
) -> None:
    spawn_worker("example_map", "--concurrency", "2", "--prefetch", "0")
    run_id = start_flow("example_map", {"count": 6})
    run = wait_for_run(run_id, timeout=30)
    assert run.status == "completed", run
    assert run.output == {"total": sum(i * i for i in range(6))}
    squares = [r for r in messages(run_id, "example_map") if r["step_slug"] == "square"]
    handed = [r for r in squares if r["read_ct"] == 0]
    assert 1 <= len(handed) <= 2, f"at most the two free slots were handed off: {squares}"
    assert all(r["read_ct"] >= 1 for r in squares if r not in handed), "the others were read"
    assert all(r["attempts_count"] == 1 for r in squares), "each ran once"
