"""Static queue access against PGMQ's dynamic SQL, on the 3-step chain's SQL alone.

``python -m bench.queue_access [--chains N] [--rounds R]`` makes its own database on the bench server
(``DATABASE_URL``, else the embedded PostgreSQL), migrates it and compiles the bench flows. Each round
runs N chains on one connection, each call as the worker makes it: ``start_flow``, the first step's
read and claim, two completions that hand off the next step (``complete_and_hand_off``) and the last
completion, each in its own transaction. Rounds alternate two ways to the queue: ``static`` (the
queue's branch of ``pgflow.queue_access``) and ``dynamic`` (no branch: the archive table's ``headers``
column is made ``json`` for a moment while ``pgflow.write_queue_access()`` runs, so the queue goes
through PGMQ's functions as any queue without a branch does). Figures per round: p50 of each call and
of the whole chain, and the backend's CPU per chain when the server runs on this machine.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import uuid
from collections.abc import Sequence
from typing import Any

import psycopg

from bench.cpu import CpuMeter, local_backend_pids
from bench.db import connect, drop_database, recreate_database, server_url, with_database

FLOW = "bench_chain"
STEPS = ("first", "second", "third")
CALLS = ("start", "read", "claim", "hand_off_1", "hand_off_2", "complete", "chain")
HAND_OFF = (
    "select c.outcome, c.run_id, c.step_slug, c.task_index, c.attempt"
    " from pgflow.complete_and_hand_off(%s::jsonb, %s, %s, %s::text[], %s::text[], %s::bigint[], 10) as c"
)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.queue_access", description=__doc__.splitlines()[0])
    parser.add_argument("--chains", type=int, default=300, help="chains per round")
    parser.add_argument("--rounds", type=int, default=4, help="rounds of each way (they alternate)")
    parser.add_argument("--warmup", type=int, default=20, help="chains run before each round's measured ones")
    parser.add_argument("--database", default="pgflow_bench_queue_access")
    parser.add_argument("--json", help="also write the figures to this file")
    parser.add_argument("--drop", action="store_true", help="drop the bench database at the end")
    return parser.parse_args(argv)


def use(conn: psycopg.Connection[Any], way: str) -> None:
    """Give the chain's queue its static branch, or take it away (the queue then has no branch)."""
    if way == "dynamic":
        with conn.transaction():
            conn.execute("alter table pgmq.a_bench_chain alter column headers type json")
            conn.execute("select pgflow.write_queue_access()")
            conn.execute("alter table pgmq.a_bench_chain alter column headers type jsonb")
    else:
        conn.execute("select pgflow.write_queue_access()")
    source = conn.execute(
        "select string_agg(prosrc, '') from pg_proc where pronamespace = 'pgflow'::regnamespace"
        " and proname ~ '^queue_access(_[0-9]{3})?$'"  # beyond 32 queues, branches are in queue_access_NNN
    ).fetchone()
    has_branch = source is not None and f"if v_queue = '{FLOW}' then" in source[0]
    if has_branch != (way == "static"):
        raise RuntimeError(f"{way}: the queue's branch is {'there' if has_branch else 'missing'}")


def one_chain(conn: psycopg.Connection[Any], worker: uuid.UUID, generation: int) -> dict[str, float]:
    """One chain, call by call as the worker makes them; milliseconds of each call."""
    spent: dict[str, float] = {}
    began = time.perf_counter()

    def timed(name: str, query: str, params: Any = None) -> list[tuple[Any, ...]]:
        at = time.perf_counter()
        rows = conn.execute(query, params).fetchall()
        spent[name] = (time.perf_counter() - at) * 1000
        return rows

    run_id = timed("start", "select run_id from pgflow.start_flow(%s, '{}'::jsonb)", [FLOW])[0][0]
    ids = [row[0] for row in timed("read", "select msg_id from pgmq.read(%s, 30, 1)", [FLOW])]
    claimed = timed(
        "claim",
        "select 'claimed', run_id, step_slug, task_index, attempt"
        " from pgflow.start_tasks(%s, %s, %s::bigint[], %s, null)",
        [FLOW, FLOW, ids, worker],
    )
    task = claimed[0]
    for name in ("hand_off_1", "hand_off_2", "complete"):
        item = {"run_id": str(task[1]), "step_slug": task[2], "task_index": task[3], "attempt": task[4]}
        rows = timed(
            name,
            HAND_OFF,
            [json.dumps([{**item, "output": None}]), FLOW, worker, [FLOW] * 3, list(STEPS), [generation] * 3],
        )
        handed = [row for row in rows if row[0] == "claimed"]
        if name != "complete":
            if len(handed) != 1:
                raise RuntimeError(f"{name}: expected the next step handed off, got {rows}")
            task = handed[0]
    spent["chain"] = (time.perf_counter() - began) * 1000
    status = conn.execute("select status from pgflow.runs where run_id = %s", [run_id]).fetchone()
    if status is None or status[0] != "completed":
        raise RuntimeError(f"chain {run_id} ended {status}")
    return spent


def measure(url: str, way: str, chains: int, warmup: int) -> dict[str, Any]:
    """One round on a new connection (its plan caches start empty, as a new worker's do)."""
    with connect(url, "pgflow bench queue access") as conn:
        use(conn, way)
        worker = uuid.uuid4()
        conn.execute(
            "insert into pgflow.workers (worker_id, queue_name, function_name) values (%s, %s, 'bench')",
            [worker, FLOW],
        )
        row = conn.execute("select generation from pgflow.flows where flow_slug = %s", [FLOW]).fetchone()
        assert row is not None
        for _ in range(warmup):
            one_chain(conn, worker, row[0])
        pids = local_backend_pids(conn, "pid = pg_backend_pid()")
        meter = CpuMeter(pids or []).start()
        calls: dict[str, list[float]] = {name: [] for name in CALLS}
        for _ in range(chains):
            for name, ms in one_chain(conn, worker, row[0]).items():
                calls[name].append(ms)
        cpu = meter.stop() if pids else None
    return {
        "way": way,
        "p50_ms": {name: round(statistics.median(values), 3) for name, values in calls.items()},
        "backend_cpu_ms_per_chain": None if cpu is None else round(cpu * 1000 / chains, 3),
    }


def migrate(url: str) -> None:
    from bench.run import setup_django

    setup_django(url)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    server = server_url()
    url = with_database(server, args.database)
    recreate_database(server, args.database)
    try:
        migrate(url)
        rounds = [
            measure(url, way, args.chains, args.warmup)
            for _ in range(args.rounds)
            for way in ("static", "dynamic")
        ]
    finally:
        if args.drop:
            from django.db import connections

            connections.close_all()
            drop_database(server, args.database)
    summary: dict[str, Any] = {"chains_per_round": args.chains, "rounds": rounds, "median": {}}
    for way in ("static", "dynamic"):
        mine = [r for r in rounds if r["way"] == way]
        cpu = [r["backend_cpu_ms_per_chain"] for r in mine if r["backend_cpu_ms_per_chain"] is not None]
        summary["median"][way] = {
            **{name: round(statistics.median(r["p50_ms"][name] for r in mine), 3) for name in CALLS},
            "backend_cpu_ms_per_chain": round(statistics.median(cpu), 3) if cpu else None,
        }
    print(f"{'round':<14}" + "".join(f"{name:>12}" for name in (*CALLS, "cpu/chain")))
    for entry in rounds:
        cells = [entry["p50_ms"][name] for name in CALLS] + [entry["backend_cpu_ms_per_chain"]]
        print(f"{entry['way']:<14}" + "".join(f"{'-' if c is None else f'{c:.3f}':>12}" for c in cells))
    for way, figures in summary["median"].items():
        cells = [figures[name] for name in CALLS] + [figures["backend_cpu_ms_per_chain"]]
        print(f"{'median ' + way:<14}" + "".join(f"{'-' if c is None else f'{c:.3f}':>12}" for c in cells))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump(summary, out, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
