"""Worker throughput with claim priorities in use and not, in the same bench run (docs/flow-control.md).

Variants, each a 1-step no-op drain of the same number of runs by one worker (the shortest task, so
the claim's share of each task shows most), measured in interleaved rounds so that a drift of the
machine hits them alike; each variant's figure is its median round:

- ``none``: every run started without a priority (its messages carry no headers);
- ``mixed``: the runs started in blocks of ``BLOCK`` with priorities cycling through ``PRIORITIES``,
  so the claim's index walk jumps between priorities as the backlog drains.
"""

from __future__ import annotations

import json
import statistics
import uuid
from collections.abc import Sequence
from pathlib import Path

from bench.db import analyze_like_autovacuum, connect
from bench.phases import BenchFlow, drain_window, start_runs, wait_finished
from bench.report import Figure
from bench.workers import RssSampler, WorkerGroup

VARIANTS = ("none", "mixed")
PRIORITIES = (-50, 0, 50, -10, 10)
BLOCK = 100
SECTION = "priority cost (1-step no-op drain, 1 worker)"


def start_prioritised(url: str, flow: BenchFlow, count: int) -> list[uuid.UUID]:
    """``count`` runs in blocks of ``BLOCK``, each block with the next priority of ``PRIORITIES``."""
    ids: list[uuid.UUID] = []
    with connect(url) as conn:
        for number, offset in enumerate(range(0, count, BLOCK)):
            size = min(BLOCK, count - offset)
            batch = [uuid.uuid4() for _ in range(size)]
            conn.execute(
                "select count(*) from pgflow.start_flows(%s, %s::jsonb, %s::uuid[], null, %s::integer)",
                [flow.slug, json.dumps([flow.run_input] * size), batch, PRIORITIES[number % len(PRIORITIES)]],
            )
            ids.extend(batch)
        analyze_like_autovacuum(conn)
    return ids


def drain_once(
    url: str,
    flow: BenchFlow,
    runs: int,
    variant: str,
    sampler: RssSampler,
    log_dir: Path,
    worker_args: Sequence[str],
    timeout: float,
) -> float:
    """One drain of ``runs`` runs by one worker in ``variant``; its tasks/s."""
    ids = start_prioritised(url, flow, runs) if variant == "mixed" else start_runs(url, flow, runs).ids
    with WorkerGroup(
        url=url,
        flow_slug=flow.slug,
        count=1,
        log_dir=log_dir / variant,
        sampler=sampler,
        extra_args=list(worker_args),
    ) as group:
        wait_finished(url, flow.slug, timeout=timeout, check=group.check_alive)
    found = drain_window(url, ids)
    if found.failed_runs:
        raise RuntimeError(f"priorities {variant}: {found.failed_runs} of {found.runs} runs failed")
    return found.tasks_per_second


def measure_priorities(
    url: str,
    flow: BenchFlow,
    runs: int,
    sampler: RssSampler,
    log_dir: Path,
    worker_args: Sequence[str],
    *,
    rounds: int,
    timeout: float,
) -> list[Figure]:
    rates: dict[str, list[float]] = {variant: [] for variant in VARIANTS}
    for number in range(rounds):
        # alternate which variant goes first, so neither always drains right after the other
        order = VARIANTS if number % 2 == 0 else tuple(reversed(VARIANTS))
        for variant in order:
            rates[variant].append(
                drain_once(url, flow, runs, variant, sampler, log_dir, worker_args, timeout)
            )
    medians = {variant: statistics.median(values) for variant, values in rates.items()}
    figures = [
        Figure(
            key=f"prio_{variant}",
            section=SECTION,
            label=f"{variant}, median of {rounds} rounds",
            value=medians[variant],
            unit="tasks/s",
            detail={"rounds": [round(rate, 1) for rate in rates[variant]], "runs": runs},
        )
        for variant in VARIANTS
    ]
    kept = medians["mixed"] / medians["none"] * 100 if medians["none"] > 0 else 0.0
    figures.append(
        Figure(
            key="prio_mixed_kept_pct",
            section=SECTION,
            label="mixed priorities: throughput kept, % of none (100 - cost)",
            value=kept,
            unit="%",
            is_rate=False,
        )
    )
    return figures
