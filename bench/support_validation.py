"""The shared-queue use case, measured: the support pipeline in two concrete versions at once (a drain),
deployed step-queued (one worker pool per step per version) and routed onto two shared queues (one
pool per queue for both versions), with the same total handler threads.

    python -m bench.support_validation [--threads 40] [--messages 20] [--work-ms 5]

For each deployment it prints: worker processes, their database connections (concurrency + 3 each),
the sum of their peak RSS, the time to finish every run, and the ``acknowledge`` wait (queued ->
claimed) p50 and max, so the latency-sensitive step's isolation from classification is visible.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from bench.db import connect, recreate_database, server_url, with_database
from bench.run import setup_django
from bench.workers import RssSampler, WorkerGroup

STEPS = ("acknowledge", "messages", "classify", "route")
DEPLOYMENTS: dict[str, tuple[tuple[str, ...], list[tuple[str, list[str]]]]] = {
    "step-queued": (
        ("support_thread_steps", "support_thread_steps_v2"),
        [
            (flow, ["--step", step])
            for flow in ("support_thread_steps", "support_thread_steps_v2")
            for step in STEPS
        ],
    ),
    "routed": (
        ("support_routed", "support_routed_v2"),
        [
            ("support_routed", ["--flow", "support_routed_v2", "--queue", "support_fast"]),
            ("support_routed", ["--flow", "support_routed_v2", "--queue", "support_bulk"]),
        ],
    ),
}
THREADS_PER_DEPLOYMENT = 32
"""Handler threads in total, split evenly over the deployment's worker processes."""


def measure(url: str, name: str, args: argparse.Namespace, log_dir: Path) -> dict[str, Any]:
    flows, groups = DEPLOYMENTS[name]
    concurrency = THREADS_PER_DEPLOYMENT // len(groups)
    with RssSampler() as sampler, ExitStack() as stack:
        pids: list[int] = []
        for index, (flow, extra) in enumerate(groups):
            group = stack.enter_context(
                WorkerGroup(
                    url=url,
                    flow_slug=flow,
                    count=1,
                    log_dir=log_dir / f"{name}-{index}",
                    sampler=sampler,
                    extra_args=[*extra, "--concurrency", str(concurrency)],
                )
            )
            pids.extend(group.pids)
        _wait_registered(url, len(groups))
        runs = _start(url, flows, args)
        started = time.monotonic()
        _wait_done(url, runs)
        elapsed = time.monotonic() - started
        rss = sum(sampler.peak_mb([pid]) for pid in pids)
    waits = _ack_waits(url, runs)
    return {
        "deployment": name,
        "worker_processes": len(groups),
        "database_connections": len(groups) * (concurrency + 3),
        "peak_rss_mb_total": round(rss, 1),
        "runs": len(runs),
        "seconds_to_finish": round(elapsed, 2),
        "ack_wait_p50_ms": round(statistics.median(waits), 1),
        "ack_wait_max_ms": round(max(waits), 1),
    }


def _wait_registered(url: str, count: int) -> None:
    deadline = time.monotonic() + 120
    with connect(url) as conn:
        while True:
            row = conn.execute(
                "select count(*) from pgflow.workers"
                " where stopped_at is null and last_heartbeat_at > now() - interval '30 seconds'"
            ).fetchone()
            if row and row[0] >= count:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"{count} workers did not register")
            time.sleep(0.05)


def _start(url: str, flows: Sequence[str], args: argparse.Namespace) -> list[uuid.UUID]:
    """Threads alternate between the two versions; each is a domain row plus its run."""
    runs: list[uuid.UUID] = []
    with connect(url) as conn:
        for index in range(args.threads):
            messages = [f"message {index}.{n}: refund or error" for n in range(args.messages)]
            thread_id = conn.execute(
                "insert into example_supportthread (subject, messages, labels, team, classify_done)"
                " values (%s, %s::jsonb, '[]', '', false) returning id",
                [f"thread {index}", json.dumps(messages)],
            ).fetchone()[0]
            run_id = uuid.uuid4()
            body = {"thread_id": thread_id, "messages": messages, "work_ms": args.work_ms}
            conn.execute(
                "select pgflow.start_flow(%s, %s::jsonb, %s)",
                [flows[index % len(flows)], json.dumps(body), run_id],
            )
            runs.append(run_id)
    return runs


def _wait_done(url: str, runs: list[uuid.UUID]) -> None:
    deadline = time.monotonic() + 600
    with connect(url) as conn:
        while True:
            row = conn.execute(
                "select count(*) filter (where status = 'started'), count(*) filter (where status = 'failed')"
                " from pgflow.runs where run_id = any(%s)",
                [runs],
            ).fetchone()
            if row and row[1]:
                raise RuntimeError(f"{row[1]} run(s) failed")
            if row and row[0] == 0:
                return
            if time.monotonic() > deadline:
                raise TimeoutError("runs still going after 600 s")
            time.sleep(0.05)


def _ack_waits(url: str, runs: list[uuid.UUID]) -> list[float]:
    with connect(url) as conn:
        return [
            float(row[0])
            for row in conn.execute(
                "select extract(epoch from started_at - queued_at) * 1000 from pgflow.step_tasks"
                " where run_id = any(%s) and step_slug = 'acknowledge'",
                [runs],
            ).fetchall()
        ]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.support_validation", description=__doc__.splitlines()[0]
    )
    parser.add_argument(
        "--threads", type=int, default=40, help="support threads (runs), alternating versions"
    )
    parser.add_argument("--messages", type=int, default=20, help="messages per thread (classify tasks)")
    parser.add_argument("--work-ms", type=int, default=5, help="simulated model latency per message")
    parser.add_argument("--database", default="pgflow_bench_support", help="database to (re)create")
    args = parser.parse_args(argv)
    server = server_url()
    url = with_database(server, args.database)
    recreate_database(server, args.database)
    setup_django(url)
    from pgflow_django.flows.compiler import compile_flow
    from pgflow_django.flows.registry import get_flow

    for flows, _ in DEPLOYMENTS.values():
        for slug in flows:
            compile_flow(get_flow(slug))
    results = []
    with tempfile.TemporaryDirectory(prefix="pgflow-support-") as logs:
        for name in DEPLOYMENTS:
            results.append(measure(url, name, args, Path(logs)))
            print(json.dumps(results[-1]), flush=True)
    print(json.dumps({"threads": args.threads, "messages": args.messages, "work_ms": args.work_ms}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
