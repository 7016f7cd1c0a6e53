"""Cooperative cancellation with a real worker (issue 22 item 5): a running handler learns within one
heartbeat that its run was cancelled (``ctx.cancelled``, ``await ctx.wait_cancelled()``), stops its
loop early, frees its slot for the next task, and what it returns then is not recorded."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from pgflow_django import cancel_run, start_flow, wait_for_run
from tests.sql.support import q1
from tests.workers import WorkerProcess, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

HEARTBEAT = 0.5
WORKER_ARGS = ("--concurrency", "1", "--heartbeat-seconds", str(HEARTBEAT))
PAGES = 300
"""300 pages of 0.1 s: half a minute of work if the loop never looked at ``ctx.cancelled``."""
STOPPED_WITHIN = 15.0
"""Seconds from the cancel to the next run's end: half the uncancelled loop, many heartbeats on a
busy machine."""
DOC = Path(__file__).resolve().parents[2] / "docs" / "flow-control.md"
FLOWS = Path(__file__).resolve().parents[2] / "testproject" / "example" / "flows.py"


def task(run_id: object, step: str) -> dict[str, object]:
    return q1(
        "select status, output, error_message from pgflow.step_tasks where run_id = %s and step_slug = %s",
        [run_id, step],
    )


def _cancel_stops_the_loop(worker: WorkerProcess, flow: str, step: str) -> None:
    long_run = start_flow(flow, {"pages": PAGES})
    wait_until(lambda: task(long_run, step)["status"] == "started", 15, "the long task to start")
    time.sleep(0.3)  # a few pages in
    assert cancel_run(long_run).cancelled
    cancelled_at = time.monotonic()
    wait_until(
        lambda: "that their run was cancelled" in worker.log(), STOPPED_WITHIN, "the worker to hear of it"
    )
    # one slot: the next run can only start once the cancelled handler gave up its loop
    short_run = start_flow(flow, {"pages": 1})
    assert wait_for_run(short_run, timeout=STOPPED_WITHIN).output == {step: {"done": 1}}
    assert time.monotonic() - cancelled_at < STOPPED_WITHIN, "the cancelled loop did not stop early"
    assert task(long_run, step) == {
        "status": "cancelled",
        "output": None,
        "error_message": "run failed: cancelled",
    }, "the cancelled task's completion must change nothing"
    assert q1("select status, output from pgflow.runs where run_id = %s", [long_run]) == {
        "status": "failed",
        "output": None,
    }


def test_a_sync_loop_stops_at_ctx_cancelled(spawn_worker: Callable[..., WorkerProcess]) -> None:
    _cancel_stops_the_loop(spawn_worker("example_crawl", *WORKER_ARGS), "example_crawl", "pages")


def test_an_async_handler_stops_when_wait_cancelled_returns(
    spawn_worker: Callable[..., WorkerProcess],
) -> None:
    _cancel_stops_the_loop(spawn_worker("example_acrawl", *WORKER_ARGS), "example_acrawl", "apages")


def test_the_docs_examples_are_the_ones_the_worker_runs() -> None:
    source = FLOWS.read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)
    handlers = [block for block in blocks if "ctx.cancelled" in block or "wait_cancelled" in block]
    assert len(handlers) == 2
    for block in handlers:
        body = block[block.index("@") :]
        assert body in source, "docs/flow-control.md shows a handler testproject/example/flows.py lacks"


def test_an_atomic_handler_finishing_after_the_cancel_rolls_its_writes_back(
    spawn_worker: Callable[..., WorkerProcess],
) -> None:
    worker = spawn_worker("example_ledger", *WORKER_ARGS)
    run_id = start_flow("example_ledger", [{"sleep": 2}])
    wait_until(lambda: task(run_id, "record")["status"] == "started", 15, "the task to start")
    assert cancel_run(run_id).cancelled
    wait_until(lambda: "late completion ignored" in worker.log(), 15, "the handler to finish late")
    assert task(run_id, "record")["status"] == "cancelled"
    assert q1("select count(*) as n from example_ledgerentry where key like %s", [f"{run_id}%"]) == {"n": 0}
