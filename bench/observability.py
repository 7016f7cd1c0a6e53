"""Worker throughput with observability off and on, in the same bench run (docs/observability.md).

Variants, each a 1-step no-op drain by one worker (the shortest task, so per-task costs show most),
measured in interleaved rounds so that a drift of the machine hits them alike; each variant's figure
is its median round:

- ``off``: no metrics port; OpenTelemetry's API installed without an SDK (nothing recorded);
- ``metrics``: ``--metrics-port``, scraped once a second while it drains;
- ``tracing``: the SDK configured (every span recorded, none exported: ``bench/otel_settings.py``);
- ``tracing_10``: the same, with ``PGFLOW["TRACE_SAMPLE_RATE"] = 0.1`` (one run in ten traced).
"""

from __future__ import annotations

import socket
import statistics
import threading
import urllib.request
from collections.abc import Sequence
from pathlib import Path

from bench.phases import BenchFlow, drain_window, start_runs, wait_finished
from bench.report import Figure
from bench.workers import RssSampler, WorkerGroup

VARIANTS = ("off", "metrics", "tracing", "tracing_10")
SETTINGS = {"tracing": "bench.otel_settings", "tracing_10": "bench.otel_sampled_settings"}
SECTION = "observability cost (1-step no-op drain, 1 worker)"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Scraper:
    """Reads ``/metrics`` every ``interval`` seconds from a thread, as Prometheus would (more often)."""

    def __init__(self, port: int, interval: float = 1.0) -> None:
        self.url = f"http://127.0.0.1:{port}/metrics"
        self.interval = interval
        self.scrapes = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Scraper:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                with urllib.request.urlopen(self.url, timeout=2) as response:
                    response.read()
                self.scrapes += 1
            except OSError:
                continue


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
    args = list(worker_args)
    settings = SETTINGS.get(variant, "bench.settings")
    port = 0
    if variant == "metrics":
        port = free_port()
        args += ["--metrics-port", str(port), "--metrics-host", "127.0.0.1"]
    ids = start_runs(url, flow, runs).ids
    with WorkerGroup(
        url=url,
        flow_slug=flow.slug,
        count=1,
        log_dir=log_dir / variant,
        sampler=sampler,
        extra_args=args,
        settings_module=settings,
    ) as group:
        if port:
            with Scraper(port):
                wait_finished(url, flow.slug, timeout=timeout, check=group.check_alive)
        else:
            wait_finished(url, flow.slug, timeout=timeout, check=group.check_alive)
    found = drain_window(url, ids)
    if found.failed_runs:
        raise RuntimeError(f"observability {variant}: {found.failed_runs} of {found.runs} runs failed")
    return found.tasks_per_second


def measure_observability(
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
    for _ in range(rounds):
        for variant in VARIANTS:
            rates[variant].append(
                drain_once(url, flow, runs, variant, sampler, log_dir, worker_args, timeout)
            )
    medians = {variant: statistics.median(values) for variant, values in rates.items()}
    figures = [
        Figure(
            key=f"obs_{variant}",
            section=SECTION,
            label=f"{variant}, median of {rounds} rounds",
            value=medians[variant],
            unit="tasks/s",
            detail={"rounds": [round(rate, 1) for rate in rates[variant]], "runs": runs},
        )
        for variant in VARIANTS
    ]
    for variant in VARIANTS[1:]:
        kept = medians[variant] / medians["off"] * 100 if medians["off"] > 0 else 0.0
        figures.append(
            Figure(
                key=f"obs_{variant}_kept_pct",
                section=SECTION,
                label=f"{variant}: throughput kept, % of off (100 - cost)",
                value=kept,
                unit="%",
                is_rate=False,
            )
        )
    return figures
