"""Queue provisioning with many flows: compiling one more flow and starting a worker.

``python -m bench.provisioning [--flows N] [--samples S]`` makes its own database on the bench server
(``DATABASE_URL``, else the embedded PostgreSQL), migrates it, compiles the bench flows and creates N
one-step flows (each with its queue) through ``pgflow.create_flow`` and ``pgflow.add_step``, 200 to a
transaction; each batch's milliseconds per flow show whether provisioning stays linear. With the
N flows in place it times, median of S samples:

* ``write_queue_access``: ``pgflow.write_queue_access()`` finding nothing changed, as every worker
  start-up and every deletion of a flow call it;
* ``compile_one_more``: ``compile_flow()`` of a new one-step flow (the path of ``pgflow_compile`` and of
  a worker's start-up: it creates the flow's queue), and ``delete_one``: deleting it again;
* ``worker_prepare``: ``QueueWorker.prepare()`` of ``bench_one`` in this process (the database checks,
  verifying its flow, ``write_queue_access``): a worker's start-up without Python's and Django's;
* ``worker_ready``: a ``manage.py pgflow_worker --flow bench_one`` process from its start to its row in
  ``pgflow.workers``, and ``first_run``: from then until a run of ``bench_one`` started then completed;
* ``first_call`` and ``call``: ``pgflow.queue_access('head')`` on one of the N queues as the first call
  of a new session (compiling the functions it goes through) and then per call.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from psycopg import sql

from bench.db import connect, drop_database, recreate_database, server_url, with_database

PREFIX = "bench_scale_"
BATCH = 200
HEAD = "select * from pgflow.queue_access('head', %s, null, null, null, null)"
HOLDERS = (
    "select count(*), max(array_length(regexp_split_to_array(p.prosrc, 'if v_queue = '), 1) - 1)"
    " from pg_proc as p where p.pronamespace = 'pgflow'::regnamespace"
    " and p.proname ~ '^queue_access(_[0-9]{3})?$'"
)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.provisioning", description=__doc__.splitlines()[0])
    parser.add_argument("--flows", type=int, default=2000, help="one-step flows made before measuring")
    parser.add_argument("--samples", type=int, default=5, help="samples of each figure (median)")
    parser.add_argument("--calls", type=int, default=5000, help="queue_access calls timed per sample")
    parser.add_argument("--database", default="pgflow_bench_provisioning")
    parser.add_argument("--json", help="also write the figures to this file")
    parser.add_argument("--drop", action="store_true", help="drop the bench database at the end")
    return parser.parse_args(argv)


def ms(began: float) -> float:
    return (time.perf_counter() - began) * 1000


def median_ms(samples: int, sample: Callable[[], float]) -> float:
    return round(statistics.median(sample() for _ in range(samples)), 2)


def make_flows(url: str, count: int) -> list[float]:
    """``count`` one-step flows, ``BATCH`` to a transaction; milliseconds per flow of each batch."""
    per_flow: list[float] = []
    with connect(url, "pgflow bench provisioning") as conn:
        for first in range(1, count + 1, BATCH):
            last = min(count, first + BATCH - 1)
            began = time.perf_counter()
            with conn.transaction():
                conn.execute(
                    "select count(*) from (select pgflow.create_flow(%s || i), pgflow.add_step(%s || i, 'a')"
                    " from generate_series(%s::int, %s::int) as i) as made",
                    [PREFIX, PREFIX, first, last],
                )
            per_flow.append(round(ms(began) / (last - first + 1), 2))
    return per_flow


def write_nothing(url: str) -> float:
    with connect(url, "pgflow bench provisioning") as conn:
        conn.execute("select pgflow.write_queue_access()")  # the function compiled, as in a worker
        began = time.perf_counter()
        conn.execute("select pgflow.write_queue_access()")
        return ms(began)


def compile_and_delete(index: int) -> tuple[float, float]:
    from django.db import connection

    from pgflow_django import Flow
    from pgflow_django.flows.compiler import compile_flow

    extra = Flow(f"bench_scale_extra_{index}")

    @extra.step()
    def only(flow_input: Any) -> None:
        """Do nothing."""

    began = time.perf_counter()
    compile_flow(extra)
    compiled = ms(began)
    began = time.perf_counter()
    with connection.cursor() as cursor:
        cursor.execute("select pgflow.delete_flow_and_data(%s)", [extra.slug])
    return compiled, ms(began)


def prepare_worker() -> float:
    from django.db import connections

    from bench.flows import one
    from pgflow_django.worker.options import WorkerOptions
    from pgflow_django.worker.queue_worker import QueueWorker

    connections.close_all()
    began = time.perf_counter()
    worker = QueueWorker(one, WorkerOptions.from_settings())
    worker.prepare()
    spent = ms(began)
    if worker.engine is not None:
        worker.engine.close()
    return spent


def start_worker(url: str, log_dir: Path) -> tuple[float, float]:
    """Milliseconds from a worker process's start to its registration, then to a run's completion."""
    from bench.workers import RssSampler, WorkerGroup

    with RssSampler() as sampler:
        began = time.perf_counter()
        group = WorkerGroup(url=url, flow_slug="bench_one", count=1, log_dir=log_dir, sampler=sampler)
        with group, connect(url, "pgflow bench provisioning") as conn:
            group.wait_registered(timeout=120)
            ready = ms(began)
            began = time.perf_counter()
            row = conn.execute("select run_id from pgflow.start_flow('bench_one', '{}'::jsonb)").fetchone()
            assert row is not None
            deadline = time.monotonic() + 60
            while conn.execute("select status from pgflow.runs where run_id = %s", [row[0]]).fetchone() != (
                "completed",
            ):
                group.check_alive()
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the first run of bench_one did not complete in 60 s: {row[0]}")
                time.sleep(0.002)
            first_run = ms(began)
    return ready, first_run


def queue_access_calls(url: str, queue: str, calls: int) -> tuple[float, float]:
    """The first call in a new session (ms), then microseconds per call (a server-side loop)."""
    with connect(url, "pgflow bench provisioning") as conn:
        conn.execute("select 1")
        began = time.perf_counter()
        conn.execute(HEAD, [queue]).fetchall()
        first = ms(began)
        loop = sql.SQL(
            "do $$ begin for i in 1..{calls} loop"
            " perform * from pgflow.queue_access('head', {queue}, null, null, null, null); end loop; end $$"
        ).format(calls=sql.Literal(calls), queue=sql.Literal(queue))
        began = time.perf_counter()
        conn.execute(loop)
        per_call = ms(began) * 1000 / calls
    return first, per_call


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    server = server_url()
    url = with_database(server, args.database)
    recreate_database(server, args.database)
    try:
        from bench.run import setup_django

        setup_django(url)
        began = time.perf_counter()
        per_flow = make_flows(url, args.flows)
        made_seconds = round(ms(began) / 1000, 1)
        with connect(url, "pgflow bench provisioning") as conn:
            queues = conn.execute("select count(*) from pgflow.engine_queues()").fetchone()
            holders = conn.execute(HOLDERS).fetchone()
        assert queues is not None and holders is not None
        compiled = [compile_and_delete(index) for index in range(args.samples)]
        logs = Path(tempfile.mkdtemp(prefix="pgflow-bench-provisioning-"))
        starts = [start_worker(url, logs) for _ in range(args.samples)]
        calls = [queue_access_calls(url, f"{PREFIX}{args.flows}", args.calls) for _ in range(args.samples)]
        figures = {
            "write_queue_access_ms": median_ms(args.samples, lambda: write_nothing(url)),
            "compile_one_more_ms": round(statistics.median(c for c, _ in compiled), 2),
            "delete_one_ms": round(statistics.median(d for _, d in compiled), 2),
            "worker_prepare_ms": median_ms(args.samples, prepare_worker),
            "worker_ready_ms": round(statistics.median(r for r, _ in starts), 1),
            "first_run_ms": round(statistics.median(f for _, f in starts), 1),
            "first_call_ms": round(statistics.median(f for f, _ in calls), 2),
            "call_us": round(statistics.median(c for _, c in calls), 2),
        }
    finally:
        if args.drop:
            from django.db import connections

            connections.close_all()
            drop_database(server, args.database)
    summary: dict[str, Any] = {
        "flows": args.flows,
        "queues": queues[0],
        "functions_holding_branches": holders[0],
        "most_branches_in_one_function": holders[1],
        "made_flows_seconds": made_seconds,
        "made_ms_per_flow_by_batch": per_flow,
        "samples": args.samples,
        **figures,
    }
    print(f"{args.flows} flows, {queues[0]} queues made in {made_seconds} s; ms per flow, by {BATCH}:")
    print("  " + " ".join(f"{value:.1f}" for value in per_flow))
    print(f"branches in {holders[0]} function(s), at most {holders[1]} in one; medians of {args.samples}:")
    labels = {
        "write_queue_access_ms": "write_queue_access(), nothing changed (ms)",
        "compile_one_more_ms": "compile one more 1-step flow (ms)",
        "delete_one_ms": "delete it again (ms)",
        "worker_prepare_ms": "worker start-up, in process: prepare() (ms)",
        "worker_ready_ms": "worker process: start to registered (ms)",
        "first_run_ms": "then a run started to completed (ms)",
        "first_call_ms": "queue_access: first call of a new session (ms)",
        "call_us": "queue_access: then per call (us)",
    }
    for key, label in labels.items():
        print(f"  {label:<48}{figures[key]:>10}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump(summary, out, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
