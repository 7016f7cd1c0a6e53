"""The waiting phase: many runs that wait without a worker (docs/durable.md), started beside the
1-step drain and the chain's latency, to show that waits are rows the hot path never reads.

Each waiting run has two root steps: an event wait keyed by the run's input (no timeout) and a sleep
of a day, so the table of waits holds two rows per run, none due while the phase runs. No worker
serves the waiting flow; the bench's workers still run their wait pass every second over that table.
"""

from __future__ import annotations

import json
import time

from bench.db import analyze_like_autovacuum, connect

WAITING_FLOW = "bench_waiting"
CHUNK = 1000
"""Runs per start_flows call: the start path a project would take, in a few hundred calls."""

SHAPE = {
    "options": {"max_attempts": 3, "base_delay": 1, "timeout": 60},
    "steps": [
        {
            "slug": slug,
            "step_type": "single",
            "deps": [],
            "when_unmet": "skip",
            "when_exhausted": "fail",
            "required_input_pattern": None,
            "forbidden_input_pattern": None,
            "options": {"max_attempts": None, "base_delay": None, "timeout": None, "start_delay": None},
            "wait": wait,
        }
        for slug, wait in (
            ("approved", {"kind": "event", "event": "bench.approved", "key": "$.k"}),
            ("nap", {"kind": "sleep", "seconds": 86400}),
        )
    ],
}


def start_waiting_runs(url: str, runs: int) -> float:
    """Compile the waiting flow and start ``runs`` runs of it; returns the seconds it took."""
    began = time.monotonic()
    with connect(url, "pgflow bench waiting") as conn:
        conn.execute(
            "select pgflow.ensure_flow_compiled(%s, %s::jsonb, 'refuse')", [WAITING_FLOW, json.dumps(SHAPE)]
        )
        for offset in range(0, runs, CHUNK):
            inputs = [{"k": index} for index in range(offset, min(runs, offset + CHUNK))]
            with conn.transaction():
                conn.execute(
                    "select count(*) from pgflow.start_flows(%s, %s::jsonb)",
                    [WAITING_FLOW, json.dumps(inputs)],
                )
        waits = conn.execute("select count(*) from pgflow.step_waits").fetchone()
        assert waits is not None and waits[0] == 2 * runs, f"expected {2 * runs} waits, found {waits}"
        analyze_like_autovacuum(conn)
    return time.monotonic() - began
