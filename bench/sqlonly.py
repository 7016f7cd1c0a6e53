"""The engine's database cost without a worker: the worker's own claim and completion statements.

Processes loop over a flow's queue with ``Engine.claim`` (read and ``pgflow.start_tasks`` in one
statement) and ``Engine.complete_tasks``, exactly as a worker's claim and completion paths do, with no
handler, thread pool or notification in between. It bounds what any worker can reach on this database.
"""

from __future__ import annotations

import multiprocessing as mp
import time
import uuid
from dataclasses import dataclass
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Event
from typing import Any

from psycopg.conninfo import conninfo_to_dict

from bench.cpu import CpuMeter, own_backend_pid
from pgflow_django.worker.connection import Engine, completion_item

_LEFT = "select exists(select 1 from pgflow.runs where flow_slug = %s and status = 'started')"


def _client(url: str, flow_slug: str, batch: int, ready: Queue[Any], go: Event) -> None:
    worker_id = uuid.uuid4()
    tasks = 0
    engine = Engine({**conninfo_to_dict(url), "application_name": "pgflow bench sql-only"}, "sql-only")
    conn = engine.conn
    queue = flow_slug.lower()
    table = engine.queue_table(queue)
    visibility = (
        engine.claim_visibility(
            tuple(
                (flow_slug, str(row[0]))
                for row in conn.execute(
                    "select step_slug from pgflow.steps where flow_slug = %s", [flow_slug]
                )
            )
        )
        or 5
    )
    backend = own_backend_pid(conn)
    ready.put("ready")
    go.wait()
    meter = CpuMeter([] if backend is None else [backend]).start()
    own = time.process_time()
    while True:
        claim = engine.claim(flow_slug, queue, table, worker_id, visibility, batch)
        if not claim.read_count:
            row = conn.execute(_LEFT, [flow_slug]).fetchone()
            if row is None or not row[0]:
                break
            time.sleep(0.001)
            continue
        if not claim.tasks:
            continue
        engine.complete_tasks("[" + ",".join(completion_item(task, "null") for task in claim.tasks) + "]")
        tasks += len(claim.tasks)
    ready.put((tasks, meter.stop(), time.process_time() - own))
    engine.close()


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
