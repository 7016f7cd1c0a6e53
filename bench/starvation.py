"""Starvation: how long a latency-sensitive step waits behind another step's backlog.

The flow has a map step (``bulk``) beside a one-task sibling (``ack``). Backlog runs with thousands of
map elements are started, then probe runs one by one while the backlog drains; the figure is each
probe's ``ack`` wait (queued -> claimed, database clock). Plain mode: two worker processes share the
flow's one queue, so a probe's ``ack`` queues behind every backlog task before it. Step mode
(``with_step_queues``): one process works ``bulk``'s private queue and one ``ack``'s, the same process
count, so ``ack`` never waits for the backlog (which then drains with one process instead of two).
"""

from __future__ import annotations

import json
import statistics
import time
import uuid
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

from bench.db import connect
from bench.report import Figure
from bench.workers import RssSampler, WorkerFailed, WorkerGroup


@dataclass(frozen=True)
class StarvationSizes:
    backlog_runs: int
    backlog_elements: int
    """Map elements per backlog run: the backlog is backlog_runs * backlog_elements tasks."""
    probes: int
    probe_spacing: float
    """Seconds between probe starts, so the probes spread over the backlog's drain."""
    timeout: float


MODES = (
    ("plain", "bench_starve", ((None, 2),)),
    ("step", "bench_starve_steps", (("bulk", 1), ("ack", 1))),
)
"""(mode, flow slug, ((--step or None, process count), ...)): two worker processes in each mode."""


def measure_starvation(
    url: str, sizes: StarvationSizes, sampler: RssSampler, log_dir: Path, worker_args: list[str]
) -> list[Figure]:
    figures: list[Figure] = []
    section = (
        f"starvation: 'ack' beside a {sizes.backlog_runs * sizes.backlog_elements}-task map backlog, "
        f"{sizes.probes} probe runs, 2 worker processes"
    )
    for mode, flow_slug, groups in MODES:
        with ExitStack() as stack:
            pids: list[int] = []
            for step, count in groups:
                extra = [*worker_args, *(("--step", step) if step else ())]
                group = stack.enter_context(
                    WorkerGroup(
                        url=url,
                        flow_slug=flow_slug,
                        count=count,
                        log_dir=log_dir / f"{mode}-{step or 'all'}",
                        sampler=sampler,
                        extra_args=extra,
                    )
                )
                pids.extend(group.pids)
            _wait_registered(url, flow_slug, len(pids), sizes.timeout)
            backlog, probes = _load(url, flow_slug, sizes)
            _wait_done(url, backlog + probes, sizes.timeout)
        waits, backlog_seconds = _result(url, backlog, probes)
        figures += [
            Figure(
                f"starve_{mode}_ack_p50_ms",
                section,
                f"{mode} mode: ack wait p50",
                statistics.median(waits),
                "ms",
                False,
            ),
            Figure(
                f"starve_{mode}_ack_max_ms", section, f"{mode} mode: ack wait max", max(waits), "ms", False
            ),
            Figure(
                f"starve_{mode}_backlog_s",
                section,
                f"{mode} mode: backlog drain",
                backlog_seconds,
                "s",
                False,
            ),
        ]
    return figures


def _wait_registered(url: str, flow_slug: str, count: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    with connect(url) as conn:
        while True:
            row = conn.execute(
                "select count(*) from pgflow.workers as w where w.stopped_at is null and exists ("
                " select 1 from pgflow.worker_support as s"
                " where s.worker_id = w.worker_id and s.flow_slug = %s)",
                [flow_slug],
            ).fetchone()
            if row and row[0] >= count:
                return
            if time.monotonic() > deadline:
                raise WorkerFailed(f"{count} worker(s) of {flow_slug} not registered after {timeout:.0f} s")
            time.sleep(0.05)


def _load(url: str, flow_slug: str, sizes: StarvationSizes) -> tuple[list[uuid.UUID], list[uuid.UUID]]:
    """Start the backlog in one call, then the probes one at a time."""
    backlog = [uuid.uuid4() for _ in range(sizes.backlog_runs)]
    probes: list[uuid.UUID] = []
    with connect(url) as conn:
        conn.execute(
            "select count(*) from pgflow.start_flows(%s, %s::jsonb, %s::uuid[])",
            [flow_slug, json.dumps([list(range(sizes.backlog_elements))] * sizes.backlog_runs), backlog],
        )
        for _ in range(sizes.probes):
            time.sleep(sizes.probe_spacing)
            probe = uuid.uuid4()
            conn.execute("select pgflow.start_flow(%s, '[0]'::jsonb, %s::uuid)", [flow_slug, probe])
            probes.append(probe)
    return backlog, probes


def _wait_done(url: str, run_ids: list[uuid.UUID], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    with connect(url) as conn:
        while True:
            row = conn.execute(
                "select count(*) from pgflow.runs where run_id = any(%s) and status = 'started'", [run_ids]
            ).fetchone()
            if row and row[0] == 0:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"starvation runs still running after {timeout:.0f} s")
            time.sleep(0.02)


def _result(url: str, backlog: list[uuid.UUID], probes: list[uuid.UUID]) -> tuple[list[float], float]:
    with connect(url) as conn:
        waits = [
            float(row[0])
            for row in conn.execute(
                "select extract(epoch from started_at - queued_at) * 1000 from pgflow.step_tasks"
                " where run_id = any(%s) and step_slug = 'ack' and status = 'completed'",
                [probes],
            ).fetchall()
        ]
        row = conn.execute(
            "select extract(epoch from max(completed_at) - min(queued_at)) from pgflow.step_tasks"
            " where run_id = any(%s) and step_slug = 'bulk'",
            [backlog],
        ).fetchone()
    if len(waits) != len(probes):
        raise RuntimeError(f"starvation: {len(probes) - len(waits)} probe ack task(s) did not complete")
    return [round(w, 2) for w in waits], round(float(row[0]) if row and row[0] is not None else 0.0, 3)
