"""The claim's cost with flow control in use vs not: ``python -m bench.limits_claim DATABASE_URL``.

One process drains three flows of the same shape through the worker's own claim and completion
statements (``Engine.claim``, ``Engine.complete_tasks``), A/B/C interleaved round by round, so a shared
machine's load falls on every variant alike:

  plain    no limit
  keyed    a concurrency key per run (20 keys) with a limit no batch reaches: every claim locks and
           counts its keys, nothing is deferred
  rated    the same with a rate limit per key that never runs dry

It prints each variant's median claim time per batch and its tasks per second of claim + completion.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
import uuid
from typing import Any

from psycopg.conninfo import conninfo_to_dict

from pgflow_django.worker.connection import Engine, completion_item

VARIANTS = {
    "plain": [],
    "keyed": [{"kind": "concurrency", "key_source": "input", "key_field": "key", "amount": 1_000_000}],
    "rated": [
        {
            "kind": "rate",
            "key_source": "input",
            "key_field": "key",
            "amount": 1_000_000,
            "period": 1,
            "burst": 1_000_000,
        }
    ],
}
ROUNDS, RUNS, BATCH, KEYS = 7, 400, 10, 20


def _flow(conn: Any, name: str, limits: list[dict[str, Any]]) -> str:
    slug = f"bench_limits_{name}"
    conn.execute(
        "select pgflow.delete_flow_and_data(flow_slug) from pgflow.flows where flow_slug = %s", [slug]
    )
    conn.execute("select pgflow.create_flow(%s, timeout => 30)", [slug])
    conn.execute("select pgflow.add_step(%s, 'a')", [slug])
    conn.execute("select pgflow.set_flow_limits(%s, %s::jsonb)", [slug, json.dumps(limits)])
    return slug


def _drain(engine: Engine, slug: str) -> tuple[list[float], int, float]:
    conn = engine.conn
    inputs = [{"key": f"k{n % KEYS}"} for n in range(RUNS)]
    conn.execute("select pgflow.start_flows(%s, %s::jsonb)", [slug, json.dumps(inputs)])
    table = engine.queue_table(slug)
    worker = uuid.uuid4()
    claims: list[float] = []
    tasks = 0
    began = time.perf_counter()
    while tasks < RUNS:
        at = time.perf_counter()
        claim = engine.claim(slug, slug, table, worker, 32, BATCH)
        claims.append(time.perf_counter() - at)
        if claim.tasks:
            engine.complete_tasks("[" + ",".join(completion_item(task, "null") for task in claim.tasks) + "]")
            tasks += len(claim.tasks)
    return claims, tasks, time.perf_counter() - began


def main(url: str) -> None:
    engine = Engine({**conninfo_to_dict(url), "application_name": "pgflow bench limits"}, "bench")
    slugs = {name: _flow(engine.conn, name, limits) for name, limits in VARIANTS.items()}
    claims: dict[str, list[float]] = {name: [] for name in VARIANTS}
    rates: dict[str, list[float]] = {name: [] for name in VARIANTS}
    for round_ in range(ROUNDS):
        order = list(VARIANTS) if round_ % 2 == 0 else list(reversed(VARIANTS))
        for name in order:
            spent, tasks, seconds = _drain(engine, slugs[name])
            if round_:  # the first round warms plans and caches
                claims[name].extend(spent)
                rates[name].append(tasks / seconds)
    base = statistics.median(claims["plain"])
    for name in VARIANTS:
        median = statistics.median(claims[name])
        print(
            f"{name:6} claim of {BATCH}: median {median * 1000:.2f} ms ({median / base - 1:+.0%}),"
            f" claim+complete {statistics.median(rates[name]):.0f} tasks/s"
        )
    for slug in slugs.values():
        engine.conn.execute("select pgflow.delete_flow_and_data(%s)", [slug])
    engine.close()


if __name__ == "__main__":
    main(sys.argv[1])
