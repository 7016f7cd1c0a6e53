"""The raw PGMQ limit: clients cycling send_batch -> read -> archive on one plain queue.

Each client is its own process with its own connection, every call its own autocommit transaction,
as a worker would issue them. The rate counts messages archived inside a shared timed window.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import time
from dataclasses import dataclass
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Event
from typing import Any

from bench.cpu import CpuMeter, own_backend_pid
from bench.db import connect

QUEUE = "bench_raw"


@dataclass(frozen=True)
class RawResult:
    clients: int
    batch: int
    seconds: float
    messages: int
    server_cpu: float | None
    """CPU seconds of the clients' PostgreSQL backends in the window (None: server not measurable)."""
    client_cpu: float

    @property
    def rate(self) -> float:
        return self.messages / self.seconds if self.seconds > 0 else 0.0


def create_queue(url: str) -> None:
    """A plain PGMQ queue (no notify trigger): the bare cost of the queue."""
    with connect(url) as conn:
        conn.execute("select pgmq.create(%s)", [QUEUE])


def _cycle(conn: Any, payload: list[str], batch: int) -> int:
    conn.execute("select pgmq.send_batch(%s, %s::jsonb[])", [QUEUE, payload])
    ids = [row[0] for row in conn.execute("select msg_id from pgmq.read(%s, 30, %s)", [QUEUE, batch])]
    if not ids:
        return 0
    row = conn.execute("select count(*) from pgmq.archive(%s, %s::bigint[])", [QUEUE, ids]).fetchone()
    return int(row[0]) if row else 0


def _client(url: str, batch: int, seconds: float, warmup: float, ready: Queue[Any], go: Event) -> None:
    payload = [json.dumps({"i": i}) for i in range(batch)]
    with connect(url, "pgflow bench raw") as conn:
        until = time.monotonic() + warmup
        while time.monotonic() < until:
            _cycle(conn, payload, batch)
        backend = own_backend_pid(conn)
        ready.put("ready")
        go.wait()
        messages = 0
        meter = CpuMeter([] if backend is None else [backend]).start()
        own = time.process_time()
        until = time.monotonic() + seconds
        while time.monotonic() < until:
            messages += _cycle(conn, payload, batch)
        ready.put((messages, meter.stop(), time.process_time() - own))


def measure(url: str, *, clients: int, batch: int, seconds: float, warmup: float) -> RawResult:
    """Run ``clients`` processes for ``seconds`` after a warm-up; messages/s over the shared window."""
    ctx = mp.get_context("spawn")
    ready: Queue[Any] = ctx.Queue()
    go = ctx.Event()
    procs = [
        ctx.Process(target=_client, args=(url, batch, seconds, warmup, ready, go), daemon=True)
        for _ in range(clients)
    ]
    for proc in procs:
        proc.start()
    try:
        for _ in procs:
            ready.get(timeout=120)
        go.set()
        results = [ready.get(timeout=seconds + 120) for _ in procs]
    finally:
        for proc in procs:
            proc.join(timeout=10)
            if proc.is_alive():
                proc.kill()
    server = [cpu for _, cpu, _ in results]
    return RawResult(
        clients=clients,
        batch=batch,
        seconds=seconds,
        messages=sum(count for count, _, _ in results),
        server_cpu=None if None in server else sum(cpu for cpu in server if cpu is not None),
        client_cpu=sum(cpu for _, _, cpu in results),
    )
