"""The engine measurements: drain and end-to-end throughput, and start->complete latency."""

from __future__ import annotations

import json
import statistics
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from bench.db import Window, analyze_like_autovacuum, clock, connect, window

_LEFT = "select exists(select 1 from pgflow.runs where flow_slug = %s and status = 'started')"


@dataclass(frozen=True)
class BenchFlow:
    """A bench flow, the input of one run, and how many tasks one run makes."""

    slug: str
    label: str
    run_input: Any
    tasks_per_run: int
    root_tasks: int
    """Tasks a run creates when it starts (the first step's), which sizes the end-to-end start batches."""


@dataclass(frozen=True)
class StartedRuns:
    """The runs a bench phase started, and the seconds its ``start_flows`` calls took."""

    ids: list[uuid.UUID]
    seconds: float


def start_runs(url: str, flow: BenchFlow, count: int, *, chunk: int = 1000) -> StartedRuns:
    """Start ``count`` runs through ``pgflow.start_flows``, ``chunk`` runs per call, with the ids the
    engine gives (time-ordered, as a caller that names none gets), then ANALYZE outside the timed
    calls: the planner sees the backlog, as autovacuum's analyze would within a minute of such a
    burst (on a fresh bench database, statistics taken before it would describe empty tables), but
    that analyze of every table is not part of starting runs (with a large history it took longer
    than the starts themselves)."""
    ids: list[uuid.UUID] = []
    seconds = 0.0
    with connect(url) as conn:
        for offset in range(0, count, chunk):
            size = min(chunk, count - offset)
            began = time.perf_counter()
            rows = conn.execute(
                "select run_id from pgflow.start_flows(%s, %s::jsonb)",
                [flow.slug, json.dumps([flow.run_input] * size)],
            ).fetchall()
            seconds += time.perf_counter() - began
            ids.extend(row[0] for row in rows)
        analyze_like_autovacuum(conn)
    return StartedRuns(ids, seconds)


def wait_finished(
    url: str, flow_slug: str, *, timeout: float, check: Callable[[], None] | None = None, poll: float = 0.01
) -> None:
    """Until no run of ``flow_slug`` is running; ``check`` may raise (a worker died) between polls."""
    deadline = time.monotonic() + timeout
    with connect(url) as conn:
        while True:
            row = conn.execute(_LEFT, [flow_slug]).fetchone()
            if row is not None and not row[0]:
                return
            if check is not None:
                check()
            if time.monotonic() > deadline:
                raise TimeoutError(f"runs of {flow_slug} still running after {timeout:.0f} s")
            time.sleep(poll)


def drain_window(url: str, run_ids: Sequence[uuid.UUID]) -> Window:
    """First claim to last run finished, as the database clocked them."""
    with connect(url) as conn:
        return window(conn, run_ids)


def end_to_end(
    url: str, flow: BenchFlow, count: int, *, timeout: float, check: Callable[[], None] | None = None
) -> Window:
    """Start ``count`` runs in batches of about 100 first-step tasks while workers run; time to the last.

    The engine chooses the run ids (UUIDv7), as for a caller that passes none: on a partitioned history
    they land in the current day's partition, where random ids would all go to the default one."""
    per_call = max(1, 100 // flow.root_tasks)
    ids: list[uuid.UUID] = []
    with connect(url) as conn:
        since = clock(conn)
        for offset in range(0, count, per_call):
            size = min(per_call, count - offset)
            rows = conn.execute(
                "select run_id from pgflow.start_flows(%s, %s::jsonb)",
                [flow.slug, json.dumps([flow.run_input] * size)],
            ).fetchall()
            ids.extend(row[0] for row in rows)
    wait_finished(url, flow.slug, timeout=timeout, check=check)
    with connect(url) as conn:
        return window(conn, ids, since=since)


@dataclass(frozen=True)
class Latency:
    """start -> complete of sequential runs: seen by the client (commit included), and by the server."""

    runs: int
    client_ms: list[float]
    server_ms: list[float]
    pickup_ms: float
    """Median over the runs' tasks of queued -> claimed: wake-up, read and claim of each hop (0 for a
    task handed off by the completion that created it, which is queued and claimed at once)."""
    execute_ms: float
    """Median of claimed -> completion: claim commit, handler, completion batching and its start."""

    @staticmethod
    def _pct(values: list[float], pct: int) -> float:
        if len(values) == 1:
            return values[0]
        return statistics.quantiles(values, n=100, method="inclusive")[pct - 1]

    def summary(self) -> dict[str, float]:
        return {
            "client_p50_ms": self._pct(self.client_ms, 50),
            "client_p95_ms": self._pct(self.client_ms, 95),
            "client_max_ms": max(self.client_ms),
            "server_p50_ms": self._pct(self.server_ms, 50),
            "server_p95_ms": self._pct(self.server_ms, 95),
            "hop_pickup_p50_ms": self.pickup_ms,
            "hop_execute_p50_ms": self.execute_ms,
        }


def latency(
    url: str, flow: BenchFlow, runs: int, *, warmup: int = 3, timeout: float = 30.0, poll: float = 0.0005
) -> Latency:
    """One run at a time: start it, poll its row every ``poll`` seconds until terminal, then the next."""
    client: list[float] = []
    server: list[float] = []
    measured: list[uuid.UUID] = []
    body = json.dumps(flow.run_input)
    with connect(url, "pgflow bench latency") as conn:
        for index in range(warmup + runs):
            began = time.perf_counter()
            row = conn.execute(
                "select run_id from pgflow.start_flow(%s, %s::jsonb)", [flow.slug, body]
            ).fetchone()
            assert row is not None
            run_id = row[0]
            deadline = time.monotonic() + timeout
            while True:
                state = conn.execute(
                    "select status, extract(epoch from coalesce(completed_at, failed_at) - started_at)"
                    " from pgflow.runs where run_id = %s",
                    [run_id],
                ).fetchone()
                if state is not None and state[0] != "started":
                    break
                if time.monotonic() > deadline:
                    raise TimeoutError(f"run {run_id} of {flow.slug} not finished after {timeout:.0f} s")
                time.sleep(poll)
            seen = time.perf_counter() - began
            if state[0] != "completed":
                raise RuntimeError(f"latency run {run_id} of {flow.slug} ended {state[0]}")
            if index >= warmup:
                client.append(seen * 1000)
                server.append(float(state[1]) * 1000)
                measured.append(run_id)
        hops = conn.execute(
            """
            select percentile_cont(0.5) within group (order by extract(epoch from started_at - queued_at)),
                   percentile_cont(0.5) within group (order by extract(epoch from completed_at - started_at))
              from pgflow.step_tasks
             where run_id = any(%s)
            """,
            [measured],
        ).fetchone()
    assert hops is not None
    return Latency(
        runs=runs,
        client_ms=client,
        server_ms=server,
        pickup_ms=float(hops[0]) * 1000,
        execute_ms=float(hops[1]) * 1000,
    )


def function_profile(url: str, limit: int = 12) -> list[dict[str, Any]]:
    """The top pgflow/pgmq functions by self time since the last reset (needs track_functions)."""
    with connect(url) as conn:
        rows = conn.execute(
            """
            select schemaname || '.' || funcname, calls, round(total_time::numeric, 1),
                   round(self_time::numeric, 1), round((self_time / greatest(calls, 1))::numeric, 3)
              from pg_stat_user_functions
             order by self_time desc
             limit %s
            """,
            [limit],
        ).fetchall()
    return [
        {
            "function": name,
            "calls": calls,
            "total_ms": float(total),
            "self_ms": float(own),
            "self_ms_per_call": float(per),
        }
        for name, calls, total, own, per in rows
    ]


def reset_stats(url: str) -> None:
    with connect(url) as conn:
        conn.execute("select pg_stat_reset()")
