"""The engine's database cost without a worker: pgmq.read -> pgflow.start_tasks -> pgflow.complete_tasks.

Processes loop over a flow's queue exactly as a worker's claim and completion paths do, with no handler,
thread pool or notification in between. It bounds what any worker can reach on this database.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import time
import uuid
from dataclasses import dataclass
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Event
from typing import Any

from bench.cpu import CpuMeter, own_backend_pid
from bench.db import connect

_READ = "select msg_id from pgmq.read(%s, 5, %s)"
_CLAIM = "select run_id, step_slug, task_index, attempt from pgflow.start_tasks(%s, %s::bigint[], %s::uuid)"
_COMPLETE = "select count(*) from pgflow.complete_tasks(%s::jsonb)"
_LEFT = "select exists(select 1 from pgflow.runs where flow_slug = %s and status = 'started')"


def _client(url: str, flow_slug: str, batch: int, ready: Queue[Any], go: Event) -> None:
    worker_id = uuid.uuid4()
    tasks = 0
    with connect(url, "pgflow bench sql-only") as conn:
        backend = own_backend_pid(conn)
        ready.put("ready")
        go.wait()
        meter = CpuMeter([] if backend is None else [backend]).start()
        own = time.process_time()
        while True:
            ids = [row[0] for row in conn.execute(_READ, [flow_slug, batch])]
            if not ids:
                row = conn.execute(_LEFT, [flow_slug]).fetchone()
                if row is None or not row[0]:
                    break
                time.sleep(0.001)
                continue
            claimed = conn.execute(_CLAIM, [flow_slug, ids, worker_id]).fetchall()
            if not claimed:
                continue
            items = [
                {
                    "run_id": str(run_id),
                    "step_slug": step,
                    "task_index": index,
                    "attempt": attempt,
                    "output": None,
                }
                for run_id, step, index, attempt in claimed
            ]
            conn.execute(_COMPLETE, [json.dumps(items)])
            tasks += len(items)
        ready.put((tasks, meter.stop(), time.process_time() - own))


@dataclass(frozen=True)
class Cpu:
    """CPU seconds over a drain: the loop's PostgreSQL backends (None: not measurable) and its processes."""

    tasks: int
    server: float | None
    client: float


def drain(url: str, flow_slug: str, *, clients: int, batch: int, timeout: float) -> Cpu:
    """Run ``clients`` processes until no run of ``flow_slug`` is left running."""
    ctx = mp.get_context("spawn")
    ready: Queue[Any] = ctx.Queue()
    go = ctx.Event()
    procs = [
        ctx.Process(target=_client, args=(url, flow_slug, batch, ready, go), daemon=True)
        for _ in range(clients)
    ]
    for proc in procs:
        proc.start()
    try:
        for _ in procs:
            ready.get(timeout=120)
        go.set()
        results = [ready.get(timeout=timeout) for _ in procs]
    finally:
        for proc in procs:
            proc.join(timeout=10)
            if proc.is_alive():
                proc.kill()
    server = [cpu for _, cpu, _ in results]
    return Cpu(
        tasks=sum(count for count, _, _ in results),
        server=None if None in server else sum(cpu for cpu in server if cpu is not None),
        client=sum(cpu for _, _, cpu in results),
    )
