"""``python -m bench.run`` (``make bench``): every figure from one run on one fresh database.

Order: raw PGMQ limit (1 and 2 clients), the SQL-only engine loop, then real ``pgflow_worker``
processes (1 and 2 per flow) for drain and end-to-end throughput, the chain's latency with an idle
worker and the workers' peak RSS; then the history phase (``--history`` finished runs preloaded, and
the start rate, the 1-step drain and the chain's latency again), and the raw limit again (the better
window is the reference).
``--quick`` is a smoke run with tiny counts.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console

from bench import floor, pgmq_raw, sqlonly
from bench.cpu import CpuMeter, local_backend_pids
from bench.db import (
    DEFAULT_DATABASE,
    REPO_DIR,
    Window,
    analyze_only_between_phases,
    connect,
    drop_database,
    recreate_database,
    server_info,
    server_url,
    set_database_option,
    vacuum_analyze,
    with_database,
)
from bench.flows import MAP_SIZE
from bench.history import partition_history, preload_finished_runs
from bench.observability import measure_observability
from bench.phases import (
    BenchFlow,
    drain_window,
    end_to_end,
    function_profile,
    latency,
    reset_stats,
    start_runs,
    wait_finished,
)
from bench.priorities import measure_priorities
from bench.report import Figure, Report, Target
from bench.starvation import StarvationSizes, measure_starvation
from bench.waiting import start_waiting_runs
from bench.workers import RssSampler, WorkerGroup

FLOWS = (
    BenchFlow("bench_one", "1-step", {}, tasks_per_run=1, root_tasks=1),
    BenchFlow("bench_chain", "3-step chain", {}, tasks_per_run=3, root_tasks=1),
    BenchFlow("bench_map", f"{MAP_SIZE}-element map", list(range(MAP_SIZE)), MAP_SIZE, MAP_SIZE),
)
RAW_BATCH = 100
THROUGHPUT_WORKER_ARGS = "--concurrency 100 --batch-size 100"
"""Worker options of the throughput and latency phases unless --worker-args is given: a no-op handler
is the shortest handler there is, and short handlers are run with large batches (docs/worker.md)."""


TARGETS = (
    Target(
        "1-step no-op drain, 2 workers, vs raw 2-client cycle", "drain_bench_one_2", ">=", 0.25, ratio=True
    ),
    Target("3-step chain start->complete p50 (client)", "latency_client_p50_ms", "<=", 6.0),
    Target("3-step chain start->complete p95 (client)", "latency_client_p95_ms", "<=", 12.0),
    Target(
        "1-step drain, 2 workers, defaults vs tuned",
        "drain_bench_one_2_defaults",
        ">=",
        0.8,
        versus="drain_bench_one_2",
    ),
    Target(
        "1-step drain, 1 worker serving every flow vs --flow",
        "drain_bench_one_1_all_flows",
        ">=",
        0.9,
        versus="drain_bench_one_1_one_flow",
    ),
    Target(
        "start rate with history vs without", "start_bench_one_history", ">=", 0.8, versus="start_bench_one"
    ),
    Target(
        "1-step drain with history vs without",
        "drain_bench_one_2_history",
        ">=",
        0.8,
        versus="drain_bench_one_2",
    ),
    Target(
        "chain p50 with history vs without",
        "latency_client_p50_ms_history",
        "<=",
        1.2,
        versus="latency_client_p50_ms",
    ),
    Target(
        "1-step drain with waiting runs vs without",
        "drain_bench_one_2_waiting",
        ">=",
        0.9,
        versus="drain_bench_one_2_no_waits",
    ),
    Target(
        "chain p50 with waiting runs vs without",
        "latency_client_p50_ms_waiting",
        "<=",
        1.1,
        versus="latency_client_p50_ms_no_waits",
    ),
    Target("worker peak RSS (MB)", "rss_peak", "<=", 100.0),
    Target("metrics on: throughput kept (% of off)", "obs_metrics_kept_pct", ">=", 95.0),
    Target("tracing, SDK recording: throughput kept (% of off)", "obs_tracing_kept_pct", ">=", 85.0),
    Target(
        "tracing, SDK recording, 10 % of runs sampled: throughput kept (% of off)",
        "obs_tracing_10_kept_pct",
        ">=",
        95.0,
    ),
    Target("mixed priorities: throughput kept (% of none)", "prio_mixed_kept_pct", ">=", 90.0),
    *floor.TARGETS,
)
"""Issues 3, 19, 20, 22 and 38's targets; reported, never asserted."""


@dataclass(frozen=True)
class Sizes:
    raw_seconds: float
    raw_warmup: float
    runs: dict[str, int]
    """Runs per measurement, by flow slug (the map's runs are 100 tasks each)."""
    latency_runs: int
    history: int
    """Finished runs preloaded for the history phase (0: no history phase)."""
    waiting: int
    """Runs that wait for an event and sleep, started for the waiting phase (0: no waiting phase)."""
    timeout: float
    counts: dict[str, tuple[int, ...]]
    """Worker (and SQL-only) process counts measured, by flow slug."""
    starvation: StarvationSizes
    observability_rounds: int = 3
    """Interleaved rounds of the observability off / metrics / tracing drains."""
    priority_rounds: int = 4
    """Interleaved rounds of the drains without and with priorities."""
    project_rounds: int = 3
    """Interleaved rounds of the --flow vs every-flow drain: the machine's noise hits both alike."""

    def plan(self, flows: Sequence[BenchFlow] = ()) -> list[tuple[BenchFlow, int]]:
        """Every (flow, process count) pair to measure, flows in order."""
        return [(flow, count) for flow in flows or FLOWS for count in self.counts[flow.slug]]


FULL = Sizes(
    raw_seconds=4.0,
    raw_warmup=1.0,
    runs={"bench_one": 6000, "bench_chain": 2000, "bench_map": 60},
    latency_runs=200,
    history=1_000_000,
    waiting=10_000,
    timeout=600.0,
    counts={"bench_one": (1, 2), "bench_chain": (1, 2), "bench_map": (1, 2)},
    starvation=StarvationSizes(
        backlog_runs=4, backlog_elements=1000, probes=40, probe_spacing=0.05, timeout=300.0
    ),
)
QUICK = Sizes(
    raw_seconds=0.2,
    raw_warmup=0.05,
    runs={"bench_one": 20, "bench_chain": 10, "bench_map": 2},
    latency_runs=5,
    history=2000,
    waiting=200,
    timeout=120.0,
    counts={"bench_one": (1, 2), "bench_chain": (1,), "bench_map": (1,)},
    starvation=StarvationSizes(
        backlog_runs=1, backlog_elements=20, probes=3, probe_spacing=0.01, timeout=120.0
    ),
    observability_rounds=1,
    priority_rounds=1,
    project_rounds=1,
)
"""A smoke run: every code path once (2 processes only for the 1-step flow), figures meaningless."""


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smoke run: tiny counts, seconds")
    parser.add_argument(
        "--database",
        default=DEFAULT_DATABASE,
        help=f"database to (re)create on the server (default {DEFAULT_DATABASE}; dropped first if present)",
    )
    parser.add_argument(
        "--results-dir", type=Path, default=REPO_DIR / "bench" / "results", help="where the JSON goes"
    )
    parser.add_argument(
        "--worker-args",
        default=None,
        help="pgflow_worker arguments of every worker phase, e.g. '--concurrency 10 --batch-size 10' "
        f"(default: '{THROUGHPUT_WORKER_ARGS}' for throughput and latency, the worker's defaults for "
        "the starvation scenario and the defaults figure)",
    )
    parser.add_argument(
        "--sql-batch", type=int, default=100, help="messages per read in the SQL-only loop (default 100)"
    )
    parser.add_argument("--no-workers", action="store_true", help="only the raw and SQL-only figures")
    parser.add_argument(
        "--no-starvation", action="store_true", help="skip the starvation scenario (plain vs step-queued)"
    )
    parser.add_argument(
        "--sync-off",
        action="store_true",
        help="also measure the raw 2-client and 1-step figures with synchronous_commit off, shown beside",
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="track_functions=pl on the bench database; print pg_stat_user_functions per worker phase",
    )
    parser.add_argument(
        "--no-observability",
        action="store_true",
        help="skip the observability cost drains (metrics and tracing off vs on)",
    )
    parser.add_argument(
        "--only-observability",
        action="store_true",
        help="of the worker phases, run only the observability cost drains",
    )
    parser.add_argument(
        "--only-project",
        action="store_true",
        help="of the worker phases, run only the 1-step drain with --flow vs a worker serving every flow",
    )
    parser.add_argument(
        "--no-priorities", action="store_true", help="skip the priority cost drains (none vs mixed)"
    )
    parser.add_argument(
        "--only-priorities",
        action="store_true",
        help="of the worker phases, run only the priority cost drains",
    )
    parser.add_argument(
        "--no-floor", action="store_true", help="skip the floor reference (bench/floor.py) and its ratios"
    )
    parser.add_argument(
        "--only-floor",
        action="store_true",
        help="run only raw PGMQ, the floor reference and the engine's chain and 1-step task beside it",
    )
    parser.add_argument(
        "--history",
        type=int,
        default=None,
        help="finished runs preloaded for the history phase (default 1,000,000; --quick 2,000; 0 skips it)",
    )
    parser.add_argument(
        "--waiting",
        type=int,
        default=None,
        help="runs that wait (an event and a day's sleep each) for the waiting phase (default 10,000;"
        " --quick 200; 0 skips it)",
    )
    parser.add_argument(
        "--only-waiting",
        action="store_true",
        help="run only the waiting phase (1-step drain and chain latency without, then with waiting runs)",
    )
    parser.add_argument(
        "--only-history",
        action="store_true",
        help="run only the history phase (preload, then start rate, 1-step drain and chain latency)",
    )
    parser.add_argument(
        "--partitioned",
        action="store_true",
        help="partition the history by day (pgflow_partition) before any phase, with partitions"
        " back over the preloaded history's days",
    )
    parser.add_argument("--drop", action="store_true", help="drop the bench database at the end")
    return parser.parse_args(argv)


def setup_django(url: str) -> bool:
    """Point Django at the bench database, migrate it and compile the bench flows; True if a worker exists."""
    os.environ["DATABASE_URL"] = url
    os.environ["DJANGO_SETTINGS_MODULE"] = "bench.settings"
    import django
    from django.core.management import call_command, get_commands

    django.setup()
    call_command("migrate", verbosity=0)
    from bench.flows import chain, fanout, one, starve, starve_steps
    from pgflow_django.flows.compiler import compile_flow

    for flow in (one, chain, fanout, starve, starve_steps):
        compile_flow(flow)
    return "pgflow_worker" in get_commands()


def engine_figure(key: str, section: str, label: str, found: Window, **detail: Any) -> Figure:
    if found.failed_runs:
        raise RuntimeError(f"{label}: {found.failed_runs} of {found.runs} no-op runs failed")
    return Figure(
        key=key,
        section=section,
        label=label,
        value=found.tasks_per_second,
        unit="tasks/s",
        runs_per_second=found.runs_per_second,
        detail={"runs": found.runs, "tasks": found.tasks, "seconds": round(found.seconds, 4), **detail},
    )


def cpu_detail(server: float | None, client: float, items: int) -> dict[str, float | None]:
    """CPU milliseconds per message or task: PostgreSQL backends (None: not measurable) and Python."""
    if items <= 0:
        return {}
    return {
        "postgres_cpu_ms_per_item": None if server is None else round(server * 1000 / items, 4),
        "python_cpu_ms_per_item": round(client * 1000 / items, 4),
    }


def raw_key(clients: int) -> str:
    return f"raw_{clients}_client{'s' if clients > 1 else ''}"


class Bench:
    """One bench run on one database: each measure_* method adds its figures to ``report``."""

    def __init__(
        self, *, url: str, sizes: Sizes, report: Report, console: Console, worker_args: Sequence[str]
    ) -> None:
        self.url = url
        self.sizes = sizes
        self.report = report
        self.console = console
        self.worker_args = list(worker_args)
        self.began = time.monotonic()

    def say(self, text: str) -> None:
        self.console.print(f"[dim]{time.monotonic() - self.began:6.1f}s[/] {text}", highlight=False)

    def add(self, figure: Figure) -> None:
        self.report.add(figure)
        rate = "" if figure.runs_per_second is None else f", {figure.runs_per_second:,.1f} runs/s"
        self.say(f"  {figure.section} | {figure.label}: {figure.value:,.1f} {figure.unit}{rate}")

    def measure_raw(self, clients_list: Sequence[int], when: str) -> None:
        """One timed window per client count; measured again later, the figure keeps the best window."""
        for clients in clients_list:
            vacuum_analyze(self.url)
            result = pgmq_raw.measure(
                self.url,
                clients=clients,
                batch=RAW_BATCH,
                seconds=self.sizes.raw_seconds,
                warmup=self.sizes.raw_warmup,
            )
            cpu = cpu_detail(result.server_cpu, result.client_cpu, result.messages)
            sample = {"when": when, "rate": round(result.rate, 1), "messages": result.messages, **cpu}
            figure = self.report.get(raw_key(clients))
            if figure is None:
                self.add(
                    Figure(
                        key=raw_key(clients),
                        section="raw PGMQ",
                        label=f"send_batch+read+archive, batch {RAW_BATCH}, {clients} client(s)",
                        value=result.rate,
                        unit="msgs/s",
                        detail={"seconds_per_window": result.seconds, "samples": [sample], **cpu},
                    )
                )
                continue
            figure.detail["samples"].append(sample)
            if result.rate > figure.value:
                figure.value = result.rate
                figure.detail.update(cpu)
            self.say(
                f"  raw PGMQ | {clients} client(s), {when}: {result.rate:,.1f} msgs/s "
                f"(kept: {figure.value:,.1f})"
            )

    def note_raw_spread(self) -> None:
        """Say so when the reference moved between its windows: the machine was busy with something else."""
        figure = self.report.get(raw_key(2))
        if figure is None:
            return
        rates = [sample["rate"] for sample in figure.detail["samples"]]
        if len(rates) > 1 and min(rates) < 0.8 * max(rates):
            self.report.notes.append(
                f"the raw 2-client reference varied from {min(rates):,.0f} to {max(rates):,.0f} msgs/s "
                "between its windows (other load on the machine?); ratios use the highest (conservative)"
            )

    def measure_sql_only(self, batch: int, plan: Sequence[tuple[BenchFlow, int]]) -> None:
        for flow, clients in plan:
            vacuum_analyze(self.url)
            ids = start_runs(self.url, flow, self.sizes.runs[flow.slug]).ids
            cpu = sqlonly.drain(self.url, flow.slug, clients=clients, batch=batch, timeout=self.sizes.timeout)
            self.add(
                engine_figure(
                    f"sql_{flow.slug}_{clients}",
                    "SQL-only engine loop (no worker)",
                    f"{flow.label}, {clients} process(es), drain",
                    drain_window(self.url, ids),
                    batch=batch,
                    **cpu_detail(cpu.server, cpu.client, cpu.tasks),
                )
            )

    def measure_workers(
        self,
        sampler: RssSampler,
        log_dir: Path,
        plan: Sequence[tuple[BenchFlow, int]],
        *,
        profile: bool = False,
        end_to_end_too: bool = True,
    ) -> None:
        for flow, count in plan:
            vacuum_analyze(self.url)
            if profile:
                reset_stats(self.url)
            self.worker_phase(flow, count, sampler, log_dir, end_to_end_too=end_to_end_too)
            if profile:
                time.sleep(1.0)
                self.report.profiles[f"{flow.slug}, {count} worker(s)"] = function_profile(self.url)

    def measure_defaults_drain(self, sampler: RssSampler, log_dir: Path, default_args: Sequence[str]) -> None:
        """The 1-step drain with 2 workers again, with the worker's default options (or --worker-args)."""
        vacuum_analyze(self.url)
        self.worker_phase(
            FLOWS[0], 2, sampler, log_dir, end_to_end_too=False, worker_args=default_args, variant="defaults"
        )

    def measure_project_worker(self, sampler: RssSampler, log_dir: Path) -> None:
        """The 1-step drain with one worker started with ``--flow`` for that flow, and with one that
        serves every flow and task of the bench project (no selection): the cost of serving them all.
        Interleaved rounds, the order swapped each round; the best drain of each is kept."""
        variants = [("one_flow", False), ("all_flows", True)]
        for _ in range(self.sizes.project_rounds):
            for variant, serve_all in variants:
                vacuum_analyze(self.url)
                self.worker_phase(
                    FLOWS[0], 1, sampler, log_dir, end_to_end_too=False, variant=variant, serve_all=serve_all
                )
            variants.reverse()
        for variant, _ in variants:
            key = f"drain_{FLOWS[0].slug}_1_{variant}"
            best = max((f for f in self.report.figures if f.key == key), key=lambda figure: figure.value)
            self.report.figures = [f for f in self.report.figures if f.key != key or f is best]

    def worker_phase(
        self,
        flow: BenchFlow,
        count: int,
        sampler: RssSampler,
        log_dir: Path,
        *,
        end_to_end_too: bool,
        worker_args: Sequence[str] | None = None,
        variant: str = "",
        serve_all: bool = False,
    ) -> None:
        """Drain runs started beforehand, then (workers idle) end to end, then the chain's latency.

        ``worker_args`` replaces the bench's worker options; ``variant`` names that drain figure apart;
        ``serve_all`` starts workers with no ``--flow`` (every flow of the project)."""
        args = self.worker_args if worker_args is None else list(worker_args)
        key = f"drain_{flow.slug}_{count}" + (f"_{variant}" if variant else "")
        label = (
            f"{flow.label}, {count} worker(s)"
            + (f", options: {' '.join(args) or 'defaults'}" if variant else "")
            + (", serving every flow" if serve_all else "")
        )
        runs = self.sizes.runs[flow.slug]
        timeout = self.sizes.timeout
        ids = self.timed_start(flow, runs, variant)
        spawned = time.monotonic()
        with WorkerGroup(
            url=self.url,
            flow_slug=flow.slug,
            count=count,
            log_dir=log_dir,
            sampler=sampler,
            extra_args=args,
            serve_all=serve_all,
        ) as group:
            wait_finished(self.url, flow.slug, timeout=timeout, check=group.check_alive)
            wall = time.monotonic() - spawned
            drained = drain_window(self.url, ids)
            self.add(
                engine_figure(
                    key,
                    "worker drain (runs started beforehand)",
                    label,
                    drained,
                    worker_start_spread_s=worker_start_spread(self.url, flow.slug),
                    spawn_to_drained_s=round(wall, 3),
                )
            )
            if end_to_end_too:
                group.wait_registered(timeout=60)
                time.sleep(0.2)
                with connect(self.url) as conn:
                    backends = local_backend_pids(conn, "application_name not like %s", ["pgflow bench%"])
                server_meter = CpuMeter(backends or []).start()
                worker_meter = CpuMeter(group.pids).start()
                found = end_to_end(self.url, flow, runs, timeout=timeout, check=group.check_alive)
                server_cpu = server_meter.stop() if backends is not None else None
                worker_cpu = worker_meter.stop() or 0.0
                self.add(
                    engine_figure(
                        f"e2e_{flow.slug}_{count}" + (f"_{variant}" if variant else ""),
                        "worker end to end (starts included)",
                        label,
                        found,
                        **cpu_detail(server_cpu, worker_cpu, found.tasks),
                    )
                )
                if flow.slug == "bench_chain" and count == 1:
                    time.sleep(0.2)
                    self.measure_latency(flow, variant)
            pids = group.pids
        rss = sampler.peak_mb(pids)
        drain = self.report.get(key)
        if drain is not None:
            drain.detail["peak_rss_mb"] = round(rss, 1)

    def timed_start(self, flow: BenchFlow, runs: int, variant: str) -> list[uuid.UUID]:
        """Start the runs of a drain through start_flows (1,000 per call); the first start of each
        flow (and of each variant) is also its start-rate figure."""
        key = f"start_{flow.slug}" + (f"_{variant}" if variant else "")
        started = start_runs(self.url, flow, runs)
        seconds = started.seconds
        if self.report.get(key) is None and seconds > 0:
            self.add(
                Figure(
                    key=key,
                    section="start rate (start_flows, 1,000 runs per call)",
                    label=f"{flow.label}, {runs} runs" + (f", {variant}" if variant else ""),
                    value=runs / seconds,
                    unit="runs/s",
                    detail={"runs": runs, "seconds": round(seconds, 4)},
                )
            )
        return started.ids

    def measure_waiting(self, sampler: RssSampler, log_dir: Path) -> None:
        """The 1-step drain (2 workers) and the chain's latency without waiting runs, then with
        ``sizes.waiting`` runs each waiting for an event and sleeping (two wait rows per run)."""
        self.worker_phase(FLOWS[0], 2, sampler, log_dir, end_to_end_too=False, variant="no_waits")
        self.worker_phase(FLOWS[1], 1, sampler, log_dir, end_to_end_too=True, variant="no_waits")
        runs = self.sizes.waiting
        seconds = start_waiting_runs(self.url, runs)
        self.report.meta["waiting"] = {"runs": runs, "waits": 2 * runs, "start_seconds": round(seconds, 1)}
        self.say(f"  started {runs:,} waiting runs ({2 * runs:,} waits) in {seconds:.1f} s")
        vacuum_analyze(self.url)
        self.worker_phase(FLOWS[0], 2, sampler, log_dir, end_to_end_too=False, variant="waiting")
        self.worker_phase(FLOWS[1], 1, sampler, log_dir, end_to_end_too=True, variant="waiting")

    def measure_history(self, sampler: RssSampler, log_dir: Path) -> None:
        """Preload finished runs, then the start rate, the 1-step drain (2 workers) and the chain's
        latency again, with the same options, beside the figures measured before the history."""
        runs = self.sizes.history
        seconds = preload_finished_runs(self.url, FLOWS[0].slug, runs)
        self.report.meta["history"] = {"finished_runs": runs, "preload_seconds": round(seconds, 1)}
        self.say(f"  preloaded {runs:,} finished runs in {seconds:.1f} s")
        vacuum_analyze(self.url)
        self.worker_phase(FLOWS[0], 2, sampler, log_dir, end_to_end_too=False, variant="history")
        vacuum_analyze(self.url)
        self.worker_phase(FLOWS[1], 1, sampler, log_dir, end_to_end_too=True, variant="history")

    def measure_floor(self, sampler: RssSampler, log_dir: Path) -> None:
        """The floor reference, the engine beside it, raw PGMQ per message, the ratios and the hop profile."""
        found = floor.compare(
            self.url,
            floor.QUICK if self.report.meta.get("quick") else floor.FULL,
            sampler,
            log_dir,
            self.worker_args,
            say=self.say,
        )
        for figure in floor.figures(found):
            self.add(figure)
        self.report.hop_profile = found.profile
        self.report.meta["floor_wal_scope"] = "database (pg_walinspect)" if found.walinspect else "cluster"
        if not found.walinspect:
            self.report.notes.append(
                "floor reference: WAL is the whole cluster's (no pg_walinspect): right on a quiet server only"
            )

    def measure_latency(self, flow: BenchFlow, variant: str = "") -> None:
        runs = self.sizes.latency_runs
        measured = latency(self.url, flow, runs).summary()
        suffix = f"_{variant}" if variant else ""
        for name, label in (
            ("client_p50_ms", "p50, seen by the client"),
            ("client_p95_ms", "p95, seen by the client"),
            ("server_p50_ms", "p50, run row timestamps"),
            ("server_p95_ms", "p95, run row timestamps"),
            ("hop_pickup_p50_ms", "per step, p50 queued -> claimed"),
            ("hop_execute_p50_ms", "per step, p50 claimed -> completing"),
        ):
            self.add(
                Figure(
                    key=f"latency_{name}{suffix}",
                    section=f"{flow.label} start->complete, idle worker, {runs} runs"
                    + (f", {variant}" if variant else ""),
                    label=label,
                    value=measured[name],
                    unit="ms",
                    is_rate=False,
                )
            )


def worker_start_spread(url: str, flow_slug: str) -> float:
    """Seconds between the first and last live worker of ``flow_slug`` registering."""
    with connect(url) as conn:
        row = conn.execute(
            "select extract(epoch from max(started_at) - min(started_at)) from pgflow.workers"
            " where queue_name = %s and stopped_at is null",
            [flow_slug],
        ).fetchone()
    return round(float(row[0]), 3) if row and row[0] is not None else 0.0


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    console = Console(width=None if sys.stdout.isatty() else 150)
    sizes = QUICK if args.quick else FULL
    if args.quick:
        analyze_only_between_phases()
    if args.history is not None:
        sizes = replace(sizes, history=max(0, args.history))
    if args.waiting is not None:
        sizes = replace(sizes, waiting=max(0, args.waiting))
    started = datetime.now(UTC)
    stamp = started.strftime("%Y%m%dT%H%M%SZ")

    embedded = not os.environ.get("DATABASE_URL")
    server = server_url()
    url = with_database(server, args.database)
    default_sync = server_info(server).synchronous_commit
    console.print(f"bench database {args.database}: creating and migrating")
    recreate_database(server, args.database)
    set_database_option(server, args.database, "synchronous_commit", "on")
    if args.profile:
        set_database_option(server, args.database, "track_functions", "pl")
    has_worker = setup_django(url)
    if args.partitioned:
        partition_history(url)
    pgmq_raw.create_queue(url)

    throughput_args = THROUGHPUT_WORKER_ARGS if args.worker_args is None else args.worker_args
    default_args = "" if args.worker_args is None else args.worker_args
    report = Report(
        meta={
            "started_at": started.isoformat(timespec="seconds"),
            "quick": args.quick,
            "server": server_info(url).as_dict(),
            "server_default_synchronous_commit": default_sync,
            "database": args.database,
            "embedded": embedded,
            "sizes": asdict(sizes),
            "worker_args": throughput_args,
            "default_worker_args": default_args,
            "sql_batch": args.sql_batch,
            "python": sys.version.split()[0],
            "load_average_at_start": os.getloadavg(),
            "partitioned_history": args.partitioned,
        }
    )
    bench = Bench(
        url=url, sizes=sizes, report=report, console=console, worker_args=shlex.split(throughput_args)
    )
    try:
        if not args.only_history and not args.only_waiting:
            bench.say("raw PGMQ cycles")
            bench.measure_raw((1, 2), "first")
        if not args.only_history and not args.only_floor and not args.only_waiting:
            bench.say("SQL-only engine loop")
            bench.measure_sql_only(args.sql_batch, sizes.plan())
        if args.no_workers:
            report.notes.append("worker figures skipped (--no-workers)")
        elif not has_worker:
            report.notes.append("worker figures skipped: no pgflow_worker command in this checkout")
        else:
            bench.say("worker processes")
            with tempfile.TemporaryDirectory(prefix="pgflow-bench-") as logs, RssSampler() as sampler:
                only_some = (
                    args.only_observability
                    or args.only_priorities
                    or args.only_history
                    or args.only_waiting
                    or args.only_project
                    or args.only_floor
                )
                if not only_some:
                    bench.measure_workers(sampler, Path(logs), sizes.plan(), profile=args.profile)
                    bench.say(f"1-step, 2 workers, options: {default_args or 'the worker defaults'}")
                    bench.measure_defaults_drain(sampler, Path(logs) / "defaults", shlex.split(default_args))
                if not only_some or args.only_project:
                    bench.say("1-step, 1 worker: --flow vs serving every flow")
                    bench.measure_project_worker(sampler, Path(logs) / "project")
                if (not args.no_floor and not only_some) or args.only_floor:
                    bench.say("floor reference: a minimal durable hop beside the engine's chain")
                    bench.measure_floor(sampler, Path(logs) / "floor")
                if (not args.no_observability and not only_some) or args.only_observability:
                    bench.say("observability cost: metrics and tracing off vs on, interleaved")
                    for figure in measure_observability(
                        url,
                        FLOWS[0],
                        sizes.runs[FLOWS[0].slug],
                        sampler,
                        Path(logs) / "observability",
                        shlex.split(throughput_args),
                        rounds=sizes.observability_rounds,
                        timeout=sizes.timeout,
                    ):
                        bench.add(figure)
                if (not args.no_priorities and not only_some) or args.only_priorities:
                    bench.say("priority cost: a backlog without and with mixed priorities, interleaved")
                    for figure in measure_priorities(
                        url,
                        FLOWS[0],
                        sizes.runs[FLOWS[0].slug],
                        sampler,
                        Path(logs) / "priorities",
                        shlex.split(throughput_args),
                        rounds=sizes.priority_rounds,
                        timeout=sizes.timeout,
                    ):
                        bench.add(figure)
                if sizes.waiting and (not only_some or args.only_waiting):
                    bench.say(f"waiting: drain and latency without, then with {sizes.waiting:,} waiting runs")
                    bench.measure_waiting(sampler, Path(logs) / "waiting")
                if sizes.history and (not only_some or args.only_history):
                    bench.say(
                        f"history: {sizes.history:,} finished runs, then start, drain and latency again"
                    )
                    bench.measure_history(sampler, Path(logs) / "history")
                if not args.no_starvation and not only_some:
                    bench.say("starvation: a step beside a map backlog, plain and step-queued")
                    for figure in measure_starvation(
                        url, sizes.starvation, sampler, Path(logs) / "starvation", shlex.split(default_args)
                    ):
                        report.add(figure)
                report.add(
                    Figure(
                        key="rss_peak",
                        section="worker peak RSS",
                        label="largest worker process, all phases",
                        value=sampler.peak_mb(),
                        unit="MB",
                        is_rate=False,
                    )
                )
        if args.sync_off:
            bench.say("again with synchronous_commit off (shown beside, never instead)")
            set_database_option(server, args.database, "synchronous_commit", "off")
            try:
                measure_sync_off(bench, args, has_worker)
            finally:
                set_database_option(server, args.database, "synchronous_commit", "on")
        if not args.only_history and not args.only_floor and not args.only_waiting:
            bench.say("raw PGMQ cycles again (the reference keeps the best window)")
            bench.measure_raw((1, 2), "last")
            bench.note_raw_spread()
        report.meta["load_average_at_end"] = os.getloadavg()
        report.check_targets(TARGETS)
    finally:
        if args.drop:
            from django.db import connections

            connections.close_all()
            drop_database(server, args.database)
    report.print(console)
    path = report.write(args.results_dir, stamp)
    console.print(f"results: {path}")
    return 0


def measure_sync_off(bench: Bench, args: argparse.Namespace, has_worker: bool) -> None:
    """The reference and the 1-step figures again, into ``report.sync_off`` (headline stays untouched)."""
    side = Bench(
        url=bench.url,
        sizes=bench.sizes,
        report=Report(meta={}),
        console=bench.console,
        worker_args=bench.worker_args,
    )
    side.began = bench.began
    side.measure_raw((2,), "synchronous_commit off")
    side.measure_sql_only(args.sql_batch, [(FLOWS[0], 2)])
    if has_worker and not args.no_workers:
        with tempfile.TemporaryDirectory(prefix="pgflow-bench-") as logs, RssSampler() as sampler:
            side.measure_workers(sampler, Path(logs), [(FLOWS[0], 2)], end_to_end_too=False)
    bench.report.sync_off.update({figure.key: figure.value for figure in side.report.figures})


if __name__ == "__main__":
    sys.exit(main())
