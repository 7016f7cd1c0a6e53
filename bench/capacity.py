"""The capacity model's figures (docs/operations.md): connections per worker, database CPU and WAL per
task, storage per finished run.

``python -m bench.capacity [--quick] [--runs N] [--json FILE] [--drop]`` makes its own database on the
bench server (``DATABASE_URL``, else the embedded PostgreSQL), migrates it, compiles the bench flows
and prints:

- connections: the sessions one real worker process holds in ``pg_stat_activity`` (matched by the
  client ports of that process, so nothing else on the server is counted), at peak during a drain and
  idle after it, for a plain worker, a worker without LISTEN, one worker per step of a step-queued
  flow, and a worker through a transaction-pooling PgBouncer (the server connections the pooler
  opened); the handlers run one query on Django's connection each, as real handlers do;
- CPU and WAL: runs of a 1-step and a 3-step no-op flow started while one worker (default options)
  runs, as an application does; the CPU of every backend of the bench database (``bench.cpu``) and
  ``pg_current_wal_lsn()`` around the window, per task and per run, with ``synchronous_commit`` as the
  server has it. WAL is server-wide: the transactions other databases committed meanwhile are
  printed, so a figure taken on a shared server is known to include their writes;
- storage: ``pg_total_relation_size`` (heap, indexes, TOAST) of ``runs``, ``step_states``,
  ``step_tasks`` and the flow's PGMQ queue and archive, before and after N finished runs of a 1-step
  and a 5-step flow with small inputs: as written (dead row versions of the status updates included)
  and compacted (``VACUUM FULL``: live rows only).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import psutil
import psycopg

from bench.cpu import CpuMeter, local_backend_pids
from bench.db import connect, drop_database, recreate_database, server_info, server_url, with_database
from bench.workers import RssSampler, WorkerGroup

BENCH_APP = "pgflow bench%"
"""``application_name`` of the bench's own sessions (``bench.db.connect``), left out of every count."""

POOLER_SIZE = 20
"""PgBouncer's ``default_pool_size``: larger than what one worker asks for, so the pooler's server
connections show what the worker needs rather than the pool's cap."""


@dataclass
class Connections:
    """One worker process's sessions on the server."""

    scenario: str
    worker_args: str
    peak: int
    idle: int
    by_role: dict[str, int] = field(default_factory=dict)


@dataclass
class Cost:
    """Database CPU and WAL of a window of runs started and worked."""

    flow: str
    worker_args: str
    runs: int
    tasks: int
    seconds: float
    backend_cpu_s: float | None
    wal_bytes: int
    other_commits: int

    @property
    def cpu_ms_per_task(self) -> float | None:
        return None if self.backend_cpu_s is None else self.backend_cpu_s * 1000 / self.tasks

    @property
    def tasks_per_core_second(self) -> float | None:
        cpu = self.cpu_ms_per_task
        return None if not cpu else 1000 / cpu

    def as_dict(self) -> dict[str, Any]:
        return {
            **asdict(self),
            "tasks_per_second": round(self.tasks / self.seconds, 1) if self.seconds else None,
            "cpu_ms_per_task": None if self.cpu_ms_per_task is None else round(self.cpu_ms_per_task, 3),
            "tasks_per_core_second": None
            if self.tasks_per_core_second is None
            else round(self.tasks_per_core_second),
            "wal_bytes_per_task": round(self.wal_bytes / self.tasks),
            "wal_bytes_per_run": round(self.wal_bytes / self.runs),
        }


@dataclass
class Storage:
    """Bytes per finished run of one flow."""

    flow: str
    runs: int
    written_per_run: dict[str, int]
    compacted_per_run: dict[str, int]

    def as_dict(self) -> dict[str, Any]:
        return {
            **asdict(self),
            "written_total_per_run": sum(self.written_per_run.values()),
            "compacted_total_per_run": sum(self.compacted_per_run.values()),
        }


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.capacity", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smoke run: tiny counts, seconds")
    parser.add_argument("--runs", type=int, default=None, help="runs per CPU/WAL/storage window (2,000)")
    parser.add_argument("--database", default="pgflow_bench_capacity")
    parser.add_argument("--no-pooler", action="store_true", help="skip the PgBouncer connection count")
    parser.add_argument(
        "--worker-args",
        default="",
        help="pgflow_worker arguments of the CPU/WAL worker, e.g. '--concurrency 50 --batch-size 50' "
        "(default: the worker's defaults)",
    )
    parser.add_argument("--json", help="also write the figures to this file")
    parser.add_argument("--drop", action="store_true", help="drop the bench database at the end")
    return parser.parse_args(argv)


def setup_django(url: str) -> None:
    os.environ["DATABASE_URL"] = url
    os.environ["DJANGO_SETTINGS_MODULE"] = "bench.settings"
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)
    from bench.flows import chain, five, one, touch, touch_steps
    from pgflow_django.flows.compiler import compile_flow

    for flow in (one, chain, five, touch, touch_steps):
        compile_flow(flow)


def start(conn: psycopg.Connection[Any], slug: str, count: int, chunk: int = 100) -> list[uuid.UUID]:
    """``count`` runs with small inputs (``{"n": i}``), ``chunk`` per ``pgflow.start_flows`` call."""
    ids: list[uuid.UUID] = []
    for offset in range(0, count, chunk):
        batch = [uuid.uuid4() for _ in range(min(chunk, count - offset))]
        inputs = [{"n": offset + i} for i in range(len(batch))]
        conn.execute(
            "select count(*) from pgflow.start_flows(%s, %s::jsonb, %s::uuid[])",
            [slug, json.dumps(inputs), batch],
        )
        ids.extend(batch)
    return ids


def wait_done(conn: psycopg.Connection[Any], slug: str, group: WorkerGroup, timeout: float) -> None:
    """Until no run of ``slug`` is running (a dead worker raises)."""
    deadline = time.monotonic() + timeout
    while True:
        row = conn.execute(
            "select exists(select 1 from pgflow.runs where flow_slug = %s and status = 'started')", [slug]
        ).fetchone()
        if row is not None and not row[0]:
            return
        group.check_alive()
        if time.monotonic() > deadline:
            raise TimeoutError(f"runs of {slug} still running after {timeout:.0f} s")
        time.sleep(0.02)


def wait_registered(
    conn: psycopg.Connection[Any], group: WorkerGroup, queue: str, timeout: float = 300
) -> None:
    """Until the group's workers have live rows on ``queue`` (asked on the bench's direct session)."""
    deadline = time.monotonic() + timeout
    while True:
        group.check_alive()
        row = conn.execute(
            "select count(*) from pgflow.workers where queue_name = %s and stopped_at is null", [queue]
        ).fetchone()
        if row is not None and row[0] >= group.count:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"workers of {queue} not registered after {timeout:.0f} s")
        time.sleep(0.05)


def local_ports(pids: Sequence[int], server_port: int) -> set[int]:
    """The local TCP ports of ``pids``'s connections to ``server_port``: their sessions' client ports."""
    ports: set[int] = set()
    for pid in pids:
        try:
            conns = psutil.Process(pid).net_connections(kind="tcp")
        except psutil.Error:
            continue
        ports.update(c.laddr.port for c in conns if c.raddr and c.raddr.port == server_port)
    return ports


def sessions(conn: psycopg.Connection[Any], ports: set[int]) -> dict[str, int]:
    """This database's sessions whose client port is in ``ports``, by ``application_name``."""
    rows = conn.execute(
        "select coalesce(nullif(application_name, ''), '(none: Django)'), count(*) from pg_stat_activity"
        " where datname = current_database() and client_port = any(%s) and application_name not like %s"
        " group by 1",
        [sorted(ports), BENCH_APP],
    ).fetchall()
    return {str(name): int(count) for name, count in rows}


def count_connections(
    url: str,
    scenario: str,
    *,
    flow: str,
    steps: Sequence[str] = ("",),
    workers: int = 1,
    settings: str = "bench.settings",
    pooler: Pooler | None = None,
    runs: int,
    log_dir: Path,
) -> list[Connections]:
    """``workers`` workers per entry of ``steps`` ("" = the whole flow); the sessions of each one (or,
    through ``pooler``, each one's client connections to it and the server connections it opened),
    sampled every 20 ms during a drain of ``runs`` runs and once idle afterwards."""
    found: list[Connections] = []
    with connect(url, "pgflow bench capacity") as conn, RssSampler() as sampler, ExitStack() as stack:
        if conn.info.host.startswith("/"):
            raise SystemExit(
                "bench.capacity: connections are told apart by their TCP client ports, and this server is"
                " reached over a Unix socket; give DATABASE_URL a host and port (e.g. 127.0.0.1:5432)"
            )
        server_port = int(conn.info.port)
        probes: list[tuple[str, str, Callable[[], dict[str, int]]]] = []
        groups = []
        for step in steps:
            args = ["--no-scheduler", *(["--step", step] if step else [])]
            group = stack.enter_context(
                WorkerGroup(
                    url=pooler.url if pooler else url,
                    flow_slug=flow,
                    count=workers,
                    log_dir=log_dir / f"{scenario}-{step or 'flow'}",
                    sampler=sampler,
                    extra_args=args,
                    settings_module=settings,
                )
            )
            groups.append((step, group))
            label = scenario + (f" (step {step})" if step else "")
            for number, pid in enumerate(group.pids, 1):
                name = label + (f", worker {number}" if workers > 1 else "")
                if pooler is None:
                    probes.append((name, " ".join(args), partial(_sessions_of, conn, [pid], server_port)))
                else:
                    probes.append(
                        (
                            name + ": client connections to PgBouncer",
                            " ".join(args),
                            partial(_clients_of, pid, pooler.port),
                        )
                    )
        if pooler is not None:
            probes.append(
                (
                    f"{scenario}: PgBouncer's server connections, all {workers} workers",
                    "",
                    partial(_sessions_of, conn, [pooler.pid], server_port),
                )
            )
        queue_of = dict(
            conn.execute(
                "select step_slug, queue_name from pgflow.steps where flow_slug = %s", [flow]
            ).fetchall()
        )
        for step, group in groups:
            wait_registered(conn, group, queue_of[step] if step else flow)
        start(conn, flow, runs)
        peaks: dict[int, dict[str, int]] = {}
        deadline = time.monotonic() + 300
        while True:
            for index, (_, _, probe) in enumerate(probes):
                seen = probe()
                if sum(seen.values()) > sum(peaks.get(index, {}).values()):
                    peaks[index] = seen
            row = conn.execute(
                "select exists(select 1 from pgflow.runs where flow_slug = %s and status = 'started')", [flow]
            ).fetchone()
            if row is not None and not row[0]:
                break
            for _, group in groups:
                group.check_alive()
            if time.monotonic() > deadline:
                raise TimeoutError(f"runs of {flow} still running")
            time.sleep(0.02)
        time.sleep(1.0)
        for index, (name, shown, probe) in enumerate(probes):
            peak = peaks.get(index, {})
            found.append(
                Connections(
                    scenario=name,
                    worker_args=shown,
                    peak=sum(peak.values()),
                    idle=sum(probe().values()),
                    by_role=peak,
                )
            )
    return found


def _sessions_of(conn: psycopg.Connection[Any], pids: Sequence[int], server_port: int) -> dict[str, int]:
    return sessions(conn, local_ports(pids, server_port))


def _clients_of(pid: int, pooler_port: int) -> dict[str, int]:
    return {"client connections": len(local_ports([pid], pooler_port))}


@dataclass(frozen=True)
class Pooler:
    """A running PgBouncer: the bench database's URL through it, its pid and port."""

    url: str
    pid: int
    port: int


@contextmanager
def pgbouncer(url: str) -> Iterator[Pooler | None]:
    """A transaction-pooling PgBouncer in front of the bench server, or None when pgbouncer is not
    installed."""
    from tests.support.pgbouncer import PgBouncer, executable

    try:
        executable()
    except BaseException:  # pytest's skip: not installed
        yield None
        return
    info = psycopg.conninfo.conninfo_to_dict(url)
    host = str(info.get("host") or "127.0.0.1")
    bouncer = PgBouncer(host, int(info.get("port") or 5432), str(info.get("user") or "postgres"), POOLER_SIZE)
    try:
        assert bouncer.process is not None
        yield Pooler(bouncer.url(url), bouncer.process.pid, bouncer.port)
    finally:
        bouncer.close()


def other_commits(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute(
        "select coalesce(sum(xact_commit), 0) from pg_stat_database where datname <> current_database()"
    ).fetchone()
    return int(row[0]) if row else 0


def cost(
    url: str, slug: str, tasks_per_run: int, runs: int, log_dir: Path, worker_args: Sequence[str]
) -> Cost:
    """CPU and WAL of ``runs`` runs started (100 per call) while one default worker works them, after
    a warm-up drain that opens every session the window uses."""
    with connect(url, "pgflow bench capacity") as conn, RssSampler() as sampler:
        group = WorkerGroup(
            url=url,
            flow_slug=slug,
            count=1,
            log_dir=log_dir / f"cost-{slug}",
            sampler=sampler,
            extra_args=["--no-scheduler", *worker_args],
        )
        with group:
            wait_registered(conn, group, slug)
            start(conn, slug, max(runs // 10, 20))
            wait_done(conn, slug, group, 300)
            conn.execute("vacuum analyze")
            backends = local_backend_pids(conn)
            meter = CpuMeter(backends or []).start()
            others = other_commits(conn)
            row = conn.execute("select pg_current_wal_lsn(), clock_timestamp()").fetchone()
            assert row is not None
            lsn, began = row
            ids = start(conn, slug, runs)
            wait_done(conn, slug, group, 600)
            row = conn.execute(
                "select pg_wal_lsn_diff(pg_current_wal_lsn(), %s),"
                " extract(epoch from max(completed_at) - %s::timestamptz),"
                " count(*) filter (where status <> 'completed')"
                " from pgflow.runs where run_id = any(%s)",
                [lsn, began, ids],
            ).fetchone()
            cpu = meter.stop() if backends is not None else None
            assert row is not None
            if row[2]:
                raise RuntimeError(f"{row[2]} runs of {slug} did not complete")
            return Cost(
                flow=slug,
                worker_args=" ".join(worker_args) or "defaults",
                runs=runs,
                tasks=runs * tasks_per_run,
                seconds=round(float(row[1]), 3),
                backend_cpu_s=None if cpu is None else round(cpu, 3),
                wal_bytes=int(row[0]),
                other_commits=other_commits(conn) - others,
            )


def relation_sizes(conn: psycopg.Connection[Any], queue: str) -> dict[str, int]:
    """Heap + indexes + TOAST of the history tables and of ``queue``'s PGMQ tables."""
    names = {
        "runs": "pgflow.runs",
        "step_states": "pgflow.step_states",
        "step_tasks": "pgflow.step_tasks",
        "pgmq queue": f"pgmq.q_{queue}",
        "pgmq archive": f"pgmq.a_{queue}",
    }
    return {
        key: int(conn.execute("select pg_total_relation_size(%s::regclass)", [name]).fetchone()[0])  # type: ignore[index]
        for key, name in names.items()
    }


def compact(conn: psycopg.Connection[Any], queue: str) -> None:
    for table in (
        "pgflow.runs",
        "pgflow.step_states",
        "pgflow.step_tasks",
        f"pgmq.q_{queue}",
        f"pgmq.a_{queue}",
    ):
        conn.execute(f"vacuum full {table}")


def storage(url: str, slug: str, runs: int, log_dir: Path) -> Storage:
    """Bytes per finished run of ``slug``: the tables' growth over ``runs`` runs, divided."""
    with connect(url, "pgflow bench capacity") as conn, RssSampler() as sampler:
        compact(conn, slug)
        before = relation_sizes(conn, slug)
        group = WorkerGroup(
            url=url,
            flow_slug=slug,
            count=1,
            log_dir=log_dir / f"storage-{slug}",
            sampler=sampler,
            extra_args=["--no-scheduler"],
        )
        with group:
            wait_registered(conn, group, slug)
            start(conn, slug, runs)
            wait_done(conn, slug, group, 600)
        written = relation_sizes(conn, slug)
        compact(conn, slug)
        compacted = relation_sizes(conn, slug)
    return Storage(
        flow=slug,
        runs=runs,
        written_per_run={k: round((written[k] - before[k]) / runs) for k in before},
        compacted_per_run={k: round((compacted[k] - before[k]) / runs) for k in before},
    )


def report(result: dict[str, Any]) -> None:
    server = result["server"]
    print(
        f"PostgreSQL {server['version']}, cores={server['cpu_count']}, "
        f"synchronous_commit={server['synchronous_commit']}, fsync={server['fsync']}, "
        f"shared_buffers={server['shared_buffers']}"
    )
    print("connections per worker (sessions in pg_stat_activity: peak during a drain / idle after)")
    for c in result["connections"]:
        roles = ", ".join(f"{name} {n}" for name, n in sorted(c["by_role"].items()))
        print(f"  {c['scenario']}: peak {c['peak']}, idle {c['idle']}  [{roles}]")
    print("database CPU and WAL per task (runs started while one worker runs)")
    for c in result["costs"]:
        cpu = "n/a" if c["cpu_ms_per_task"] is None else f"{c['cpu_ms_per_task']:.3f} ms"
        per_core = "n/a" if c["tasks_per_core_second"] is None else f"{c['tasks_per_core_second']}"
        print(
            f"  {c['flow']} (worker: {c['worker_args']}): {c['tasks']} tasks in {c['seconds']} s "
            f"({c['tasks_per_second']} tasks/s); "
            f"backend CPU {cpu} per task = {per_core} tasks/s per database core; "
            f"WAL {c['wal_bytes_per_task']} B per task, {c['wal_bytes_per_run']} B per run"
            f" (other databases committed {c['other_commits']} transactions meanwhile)"
        )
    print("storage per finished run (heap + indexes + TOAST; written / compacted)")
    for s in result["storage"]:
        parts = ", ".join(
            f"{k} {s['written_per_run'][k]}/{s['compacted_per_run'][k]}" for k in s["written_per_run"]
        )
        print(
            f"  {s['flow']} ({s['runs']} runs): total {s['written_total_per_run']} B written, "
            f"{s['compacted_total_per_run']} B compacted  [{parts}]"
        )


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    runs = args.runs or (40 if args.quick else 2000)
    server = server_url()
    url = with_database(server, args.database)
    recreate_database(server, args.database)
    log_dir = Path(tempfile.mkdtemp(prefix="pgflow-capacity-"))
    try:
        setup_django(url)
        count = max(runs // 4, 20)
        connections = count_connections(url, "plain worker", flow="bench_touch", runs=count, log_dir=log_dir)
        connections += count_connections(
            url,
            "plain worker, no LISTEN",
            flow="bench_touch",
            settings="bench.pooler_settings",
            runs=count,
            log_dir=log_dir,
        )
        connections += count_connections(
            url,
            "step-queue worker",
            flow="bench_touch_steps",
            steps=("first", "second", "third"),
            runs=count,
            log_dir=log_dir,
        )
        if not args.no_pooler:
            with pgbouncer(url) as pooled:
                if pooled is not None:
                    connections += count_connections(
                        url,
                        f"plain workers through PgBouncer (transaction mode, pool of {POOLER_SIZE})",
                        flow="bench_touch",
                        workers=3,
                        settings="bench.pooler_settings",
                        pooler=pooled,
                        runs=count,
                        log_dir=log_dir,
                    )
        costs = [
            cost(url, "bench_one", 1, runs, log_dir, shlex.split(args.worker_args)),
            cost(url, "bench_chain", 3, max(runs // 3, 10), log_dir, shlex.split(args.worker_args)),
        ]
        stored = [storage(url, "bench_one", runs, log_dir), storage(url, "bench_five", runs, log_dir)]
        result = {
            "server": server_info(url).as_dict(),
            "connections": [asdict(c) for c in connections],
            "costs": [c.as_dict() for c in costs],
            "storage": [s.as_dict() for s in stored],
        }
    finally:
        if args.drop:
            drop_database(server, args.database)
    report(result)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
