"""The floor reference: the least a durable hop can cost on this server, measured in the bench's run.

A *hop* hands a chain from one task to the next. The floor does it in one statement on its own tables
(schema ``bench_floor``), each statement its own transaction committed with the bench database's
``synchronous_commit``: it completes the current task (fenced by its attempt), archives the task's
message, and creates the next task, already claimed by the worker that ran the hop, with its message,
and returns it. The last hop completes the chain's row instead. One statement starts a chain: the
chain's row, its first task and that task's message. A 3-step chain is four statements and four
commits.

The messages live in two tables of the floor's own, created ``LIKE`` the raw PGMQ queue's table and
its archive (the same columns and the same indexes, so each message costs the same rows and index
entries as a PGMQ message), and are written by plain static SQL in the hop's statement. PGMQ's own
``pgmq.archive`` and ``pgmq.send`` are not used: they are separate calls (a hop would be three
statements) and run dynamic SQL planned on each call, which is PGMQ's cost, not the floor's; raw PGMQ
is measured on its own beside the floor (``raw_per_message``).

What is measured, in the same run and database as the engine:

* the floor: chains one at a time on one connection (an idle worker that starts its own chains), each
  chain's start -> last hop committed, p50 and p95; the backend's CPU per chain; WAL per task; in
  rounds interleaved with the engine's chains (``FloorSizes.rounds``), so a change of load on the
  machine hits both alike;
* the engine: the 3-step chain with one idle ``pgflow_worker``, as the bench's latency phase does
  (``pgflow.start_flow``, then the run's row polled every 0.5 ms until it is terminal), here with the
  start on a connection of its own so that its backend's CPU is counted and the polling's is not; the
  worker's backends' CPU per chain and WAL per task over the same window; and the 1-step flow end to
  end with one worker, for CPU and WAL per 1-step task;
* raw PGMQ: ``send_batch`` + ``read`` + ``archive`` of 100 messages on one connection, CPU and WAL per
  message;
* the hop profile: the floor's chain and the engine's chain (its SQL calls replayed on one connection,
  as ``bench/queue_access.py`` makes them) with the statements and transactions per chain, the
  function calls they make (``track_functions = all``, set per session when the role may), the rows
  they write, WAL per task by record type, and, when ``pg_stat_statements`` is loaded, the statements
  it counts with nested ones tracked.

WAL is read per database with ``pg_walinspect`` when it can be installed (the records that touch this
database's blocks, and the commit records of their transactions), so other databases on the server do
not count; otherwise it falls back to the cluster-wide figures (``pg_current_wal_lsn()`` difference
and ``pg_stat_wal``), which are only right on a quiet server: the results say which one was used.
"""

from __future__ import annotations

import contextlib
import statistics
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from bench import pgmq_raw
from bench.cpu import CpuMeter, local_backend_pids, own_backend_pid
from bench.db import connect, vacuum_analyze
from bench.phases import BenchFlow, end_to_end
from bench.report import Figure, Target
from bench.workers import RssSampler, WorkerGroup

SCHEMA = "bench_floor"
STEPS = 3
CHAIN_FLOW = BenchFlow("bench_chain", "3-step chain", {}, tasks_per_run=3, root_tasks=1)
ONE_FLOW = BenchFlow("bench_one", "1-step", {}, tasks_per_run=1, root_tasks=1)
VISIBILITY = "30 seconds"
"""How long a hop's new message stays invisible: the task is claimed by the worker that created it."""

_WORKER_BACKENDS = "backend_type = 'client backend' and application_name not like %s"

START = f"""
with chain as (
  insert into {SCHEMA}.chains default values returning id
), task as (
  insert into {SCHEMA}.tasks (chain_id, step, status) select id, 1, 'started' from chain
  returning id, chain_id, step, attempt
), sent as (
  insert into {SCHEMA}.queue (vt, read_ct, message)
  select now() + interval '{VISIBILITY}', 1,
         jsonb_build_object('chain_id', chain_id, 'task_id', id, 'step', step) from task
  returning msg_id
)
select task.id, task.attempt, sent.msg_id from task, sent
"""

HOP = f"""
with done as (
  update {SCHEMA}.tasks set status = 'completed', completed_at = now(), output = 'null'::jsonb
   where id = %(task)s and attempt = %(attempt)s and status = 'started'
  returning chain_id, step
), archived as (
  delete from {SCHEMA}.queue where msg_id = %(msg)s and exists (select from done)
  returning {{columns}}
), kept as (
  insert into {SCHEMA}.archive ({{columns}}) select {{columns}} from archived
), finished as (
  update {SCHEMA}.chains set status = 'completed', completed_at = now()
   where id = (select chain_id from done where step = %(steps)s)
), next as (
  insert into {SCHEMA}.tasks (chain_id, step, status)
  select chain_id, step + 1, 'started' from done where step < %(steps)s
  returning id, chain_id, step, attempt
), sent as (
  insert into {SCHEMA}.queue (vt, read_ct, message)
  select now() + interval '{VISIBILITY}', 1,
         jsonb_build_object('chain_id', chain_id, 'task_id', id, 'step', step) from next
  returning msg_id
)
select (select count(*) from done), next.id, next.attempt, sent.msg_id
  from (values (1)) as one left join next on true left join sent on true
"""


def create_tables(url: str) -> None:
    """The floor's schema: chains, tasks, and a queue and archive laid out like the raw PGMQ queue's."""
    with connect(url) as conn:
        conn.execute(sql.SQL("drop schema if exists {} cascade").format(sql.Identifier(SCHEMA)))
        conn.execute(sql.SQL("create schema {}").format(sql.Identifier(SCHEMA)))
        conn.execute(
            f"create table {SCHEMA}.chains (id bigint generated always as identity primary key,"
            " status text not null default 'started', started_at timestamptz not null default now(),"
            " completed_at timestamptz)"
        )
        conn.execute(
            f"create table {SCHEMA}.tasks (id bigint generated always as identity primary key,"
            " chain_id bigint not null, step int not null, attempt int not null default 1,"
            " status text not null, started_at timestamptz not null default now(),"
            " completed_at timestamptz, output jsonb)"
        )
        conn.execute(f"create table {SCHEMA}.queue (like pgmq.q_{pgmq_raw.QUEUE} including all)")
        conn.execute(f"create table {SCHEMA}.archive (like pgmq.a_{pgmq_raw.QUEUE} including all)")


def hop_statement(conn: psycopg.Connection[Any]) -> str:
    """The hop's statement, with the queue table's columns (they follow the installed PGMQ)."""
    rows = conn.execute(
        "select attname from pg_attribute where attrelid = %s::regclass and attnum > 0"
        " and not attisdropped order by attnum",
        [f"{SCHEMA}.queue"],
    ).fetchall()
    return HOP.format(columns=", ".join(row[0] for row in rows))


@dataclass(frozen=True)
class Wal:
    """WAL written over a window: by this database (pg_walinspect) or by the whole cluster."""

    records: int
    bytes: int
    scope: str
    """``database`` (pg_walinspect) or ``cluster`` (lsn difference and pg_stat_wal: other databases count)."""
    by_type: dict[str, int] = field(default_factory=dict)
    """Records by ``resource_manager/record_type`` (pg_walinspect only)."""
    cluster_records: int | None = None
    cluster_bytes: int | None = None

    def plus(self, other: Wal) -> Wal:
        def add(a: int | None, b: int | None) -> int | None:
            return None if a is None or b is None else a + b

        kinds = {**self.by_type}
        for kind, count in other.by_type.items():
            kinds[kind] = kinds.get(kind, 0) + count
        return Wal(
            records=self.records + other.records,
            bytes=self.bytes + other.bytes,
            scope=self.scope,
            by_type=dict(sorted(kinds.items(), key=lambda item: -item[1])),
            cluster_records=add(self.cluster_records, other.cluster_records),
            cluster_bytes=add(self.cluster_bytes, other.cluster_bytes),
        )

    def per(self, items: int) -> dict[str, Any]:
        return {
            "wal_records_per_item": round(self.records / items, 2),
            "wal_bytes_per_item": round(self.bytes / items, 1),
            "wal_scope": self.scope,
            "cluster_wal_records_per_item": None
            if self.cluster_records is None
            else round(self.cluster_records / items, 2),
            "cluster_wal_bytes_per_item": None
            if self.cluster_bytes is None
            else round(self.cluster_bytes / items, 1),
        }


_DATABASE_WAL = r"""
with r as (
  select xid::text::bigint as xid, resource_manager || '/' || split_part(record_type, ' ', 1) as kind,
         record_length, block_ref ~ (' rel \d+/' || %(db)s || '/') as here
    from pg_get_wal_records_info(%(start)s::pg_lsn, %(end)s::pg_lsn)
), mine as (
  select distinct xid from r where here and xid <> 0
)
select kind, count(*), sum(record_length)::bigint from r
 where here or xid in (select xid from mine)
 group by kind
"""


class WalMeter:
    """WAL between ``start()`` and ``stop()``, read on a connection of its own (it writes none)."""

    def __init__(self, conn: psycopg.Connection[Any], inspect: bool) -> None:
        self.conn = conn
        self.inspect = inspect
        self._lsn: Any = None
        self._stat: tuple[int, int] | None = None

    def _pg_stat_wal(self) -> tuple[int, int] | None:
        try:
            row = self.conn.execute("select wal_records, wal_bytes from pg_stat_wal").fetchone()
        except psycopg.Error:
            return None
        return (int(row[0]), int(row[1])) if row else None

    def start(self) -> WalMeter:
        if self.inspect:
            self._hold_wal()
        row = self.conn.execute("select pg_current_wal_lsn()").fetchone()
        assert row is not None
        self._lsn = row[0]
        self._stat = self._pg_stat_wal()
        return self

    def _hold_wal(self) -> None:
        """Keep the window's WAL on disk until it is read: a temporary physical replication slot
        (dropped with this session) that reserves WAL from now. Without it, checkpoints on a busy
        server (other databases, ``DROP DATABASE``) can recycle the window's first segments before
        ``pg_walinspect`` reads them; a role that may not create one falls back to the cluster figures."""
        try:
            self.conn.execute(
                "select pg_create_physical_replication_slot(%s, true, true)",
                [f"pgflow_bench_wal_{self.conn.info.backend_pid}"],
            )
        except psycopg.Error:
            self.inspect = False

    def stop(self) -> Wal:
        row = self.conn.execute(
            "select pg_current_wal_flush_lsn(), pg_wal_lsn_diff(pg_current_wal_lsn(), %s::pg_lsn)::bigint,"
            " (select oid from pg_database where datname = current_database()),"
            " pg_current_wal_flush_lsn() > %s::pg_lsn",
            [self._lsn, self._lsn],
        ).fetchone()
        assert row is not None
        end, lsn_bytes, db, ahead = row
        stat = self._pg_stat_wal()
        cluster_records = None if stat is None or self._stat is None else stat[0] - self._stat[0]
        cluster_bytes = int(lsn_bytes)
        if self.inspect:
            rows = (
                self.conn.execute(_DATABASE_WAL, {"db": str(db), "start": self._lsn, "end": end}).fetchall()
                if ahead
                else []
            )
            by_type = {str(kind): int(count) for kind, count, _ in rows}
            return Wal(
                records=sum(by_type.values()),
                bytes=sum(int(size) for _, _, size in rows),
                scope="database",
                by_type=dict(sorted(by_type.items(), key=lambda item: -item[1])),
                cluster_records=cluster_records,
                cluster_bytes=cluster_bytes,
            )
        return Wal(
            records=cluster_records if cluster_records is not None else 0,
            bytes=cluster_bytes,
            scope="cluster",
            cluster_records=cluster_records,
            cluster_bytes=cluster_bytes,
        )


def install_walinspect(url: str) -> bool:
    """``pg_walinspect`` in the bench database (PostgreSQL 15+, superuser or pg_read_server_files)."""
    with connect(url) as conn:
        try:
            conn.execute("create extension if not exists pg_walinspect")
            conn.execute(
                "select count(*) from pg_get_wal_records_info("
                " pg_current_wal_flush_lsn() - 1024, pg_current_wal_flush_lsn())"
            )
        except psycopg.Error:
            return False
    return True


@dataclass
class Measured:
    """One side of the comparison: what it did, over which window, and what it cost."""

    name: str
    items: int
    """Chains (floor and engine chain), tasks (engine 1-step) or messages (raw PGMQ)."""
    tasks: int
    latencies_ms: list[float] = field(default_factory=list)
    backend_cpu_s: float | None = None
    wal: Wal | None = None
    detail: dict[str, Any] = field(default_factory=dict)

    def absorb(self, part: Measured) -> None:
        """Add a batch measured on its own (the rounds of an interleaved comparison)."""
        first = not self.latencies_ms and self.wal is None
        if first:
            self.items, self.tasks = 0, 0
        self.items += part.items
        self.tasks += part.tasks
        self.latencies_ms.extend(part.latencies_ms)
        if first:
            self.backend_cpu_s = part.backend_cpu_s
        elif self.backend_cpu_s is not None and part.backend_cpu_s is not None:
            self.backend_cpu_s += part.backend_cpu_s
        else:
            self.backend_cpu_s = None
        self.wal = part.wal if self.wal is None or part.wal is None else self.wal.plus(part.wal)
        self.detail["rounds"] = self.detail.get("rounds", 0) + 1

    def percentile(self, pct: int) -> float:
        values = self.latencies_ms
        if len(values) == 1:
            return values[0]
        return statistics.quantiles(values, n=100, method="inclusive")[pct - 1]

    @property
    def cpu_ms_per_item(self) -> float | None:
        return None if self.backend_cpu_s is None else self.backend_cpu_s * 1000 / self.items

    @property
    def wal_records_per_task(self) -> float | None:
        return None if self.wal is None else self.wal.records / self.tasks

    @property
    def wal_bytes_per_task(self) -> float | None:
        return None if self.wal is None else self.wal.bytes / self.tasks


@contextlib.contextmanager
def measuring(url: str, pids: list[int] | None, inspect: bool, result: Measured) -> Iterator[None]:
    """Backend CPU of ``pids`` (None: not measurable) and WAL over the block, into ``result``."""
    with connect(url, "pgflow bench floor meter") as meter_conn:
        cpu = CpuMeter(pids or []).start()
        wal = WalMeter(meter_conn, inspect).start()
        yield
        result.backend_cpu_s = cpu.stop() if pids else None
        result.wal = wal.stop()


def flush_statistics(conn: psycopg.Connection[Any]) -> None:
    """Have this session's pending statistics (pg_stat_wal's among them) flushed before its next
    ready-for-query, so that the cluster-wide fallback counts them (PostgreSQL 15+)."""
    with contextlib.suppress(psycopg.Error):
        conn.execute("select pg_stat_force_next_flush()")
        conn.execute("select 1")


def floor_chain(conn: psycopg.Connection[Any], hop: str) -> None:
    """One 3-step chain: the start statement, then one hop per task, each committed on its own."""
    row = conn.execute(START).fetchone()
    conn.commit()
    assert row is not None
    task, attempt, msg = row
    while True:
        done = conn.execute(hop, {"task": task, "attempt": attempt, "msg": msg, "steps": STEPS}).fetchone()
        conn.commit()
        if done is None or done[0] != 1:
            raise RuntimeError(f"floor hop of task {task}: not completed ({done})")
        if done[1] is None:
            return
        task, attempt, msg = done[1:]


class FloorWorker:
    """The floor's worker: one connection (autocommit off) that starts its chains and runs their hops."""

    def __init__(self, url: str, inspect: bool) -> None:
        self.url = url
        self.inspect = inspect
        self.conn = psycopg.connect(url, autocommit=False, application_name="pgflow bench floor")
        self.hop = hop_statement(self.conn)
        row = self.conn.execute("show synchronous_commit").fetchone()
        self.conn.commit()
        self.synchronous_commit = row[0] if row else "?"
        self.pid = own_backend_pid(self.conn)
        self.conn.commit()

    def close(self) -> None:
        self.conn.close()

    def warm_up(self, chains: int) -> None:
        for _ in range(chains):
            floor_chain(self.conn, self.hop)

    def batch(self, chains: int, into: Measured) -> None:
        """``chains`` chains one after the other, measured, added to ``into``."""
        part = Measured("floor", items=chains, tasks=chains * STEPS)
        with measuring(self.url, None if self.pid is None else [self.pid], self.inspect, part):
            for _ in range(chains):
                began = time.perf_counter()
                floor_chain(self.conn, self.hop)
                part.latencies_ms.append((time.perf_counter() - began) * 1000)
            flush_statistics(self.conn)
            self.conn.commit()
        into.absorb(part)
        into.detail["synchronous_commit"] = self.synchronous_commit


def raw_per_message(url: str, cycles: int, *, inspect: bool, batch: int = 100) -> Measured:
    """Raw PGMQ on one connection: ``cycles`` of send_batch + read + archive of ``batch`` messages."""
    payload = [f'{{"i": {i}}}' for i in range(batch)]
    result = Measured("raw PGMQ", items=cycles * batch, tasks=cycles * batch, detail={"batch": batch})
    with connect(url, "pgflow bench floor raw") as conn:
        for _ in range(3):
            pgmq_raw._cycle(conn, payload, batch)
        pid = own_backend_pid(conn)
        moved = 0
        with measuring(url, None if pid is None else [pid], inspect, result):
            for _ in range(cycles):
                moved += pgmq_raw._cycle(conn, payload, batch)
            flush_statistics(conn)
    if moved != cycles * batch:
        raise RuntimeError(f"raw PGMQ: {moved} of {cycles * batch} messages archived")
    return result


class EngineChains:
    """The 3-step chain with one idle worker, as ``bench.phases.latency`` measures it (start_flow, then
    the run's row polled every 0.5 ms until terminal); the start is on a connection of its own, so its
    backend's CPU counts and the polling connection's does not."""

    def __init__(self, url: str, group: WorkerGroup, inspect: bool, poll: float = 0.0005) -> None:
        self.url = url
        self.group = group
        self.inspect = inspect
        self.poll = poll
        self.starter = connect(url, "pgflow bench floor start")
        self.poller = connect(url, "pgflow bench floor poll")
        workers = local_backend_pids(self.poller, _WORKER_BACKENDS, ["pgflow bench%"])
        own = own_backend_pid(self.starter)
        self.pids = None if workers is None or own is None else [*workers, own]
        self.worker_backends = 0 if workers is None else len(workers)

    def close(self) -> None:
        self.starter.close()
        self.poller.close()

    def one(self) -> float:
        began = time.perf_counter()
        row = self.starter.execute(
            "select run_id from pgflow.start_flow(%s, '{}'::jsonb)", [CHAIN_FLOW.slug]
        ).fetchone()
        assert row is not None
        deadline = time.monotonic() + 30
        while True:
            state = self.poller.execute(
                "select status from pgflow.runs where run_id = %s", [row[0]]
            ).fetchone()
            if state is not None and state[0] != "started":
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"chain {row[0]} not finished after 30 s")
            self.group.check_alive()
            time.sleep(self.poll)
        if state[0] != "completed":
            raise RuntimeError(f"chain {row[0]} ended {state[0]}")
        return (time.perf_counter() - began) * 1000

    def warm_up(self, chains: int) -> None:
        for _ in range(chains):
            self.one()

    def batch(self, chains: int, into: Measured) -> None:
        part = Measured("engine chain", items=chains, tasks=chains * STEPS)
        with measuring(self.url, self.pids, self.inspect, part):
            part.latencies_ms.extend(self.one() for _ in range(chains))
        into.absorb(part)
        into.detail["worker_backends"] = self.worker_backends


def engine_one_step(url: str, group: WorkerGroup, runs: int, *, inspect: bool, timeout: float) -> Measured:
    """1-step runs end to end with one idle worker (starts of about 100 runs per call): the worker's
    backends' CPU and the WAL per task (the start calls' backend is not counted, as in the bench's
    end-to-end figures)."""
    result = Measured("engine 1-step", items=runs, tasks=runs)
    with connect(url) as conn:
        pids = local_backend_pids(conn, _WORKER_BACKENDS, ["pgflow bench%"])
    with measuring(url, pids, inspect, result):
        found = end_to_end(url, ONE_FLOW, runs, timeout=timeout, check=group.check_alive)
    if found.failed_runs or found.tasks != runs:
        raise RuntimeError(f"engine 1-step: {found.failed_runs} failed, {found.tasks} of {runs} tasks")
    result.detail["tasks_per_second"] = round(found.tasks_per_second, 1)
    return result


# The hop profile ---------------------------------------------------------------------------------


def stat_statements(url: str) -> tuple[bool, str]:
    """Whether pg_stat_statements can be read in the bench database (it must be preloaded), and why not."""
    with connect(url) as conn:
        try:
            conn.execute("create extension if not exists pg_stat_statements")
            conn.execute("select count(*) from pg_stat_statements")
        except psycopg.Error as error:
            return False, str(error).splitlines()[0]
    return True, ""


_TABLE_WRITES = """
select coalesce(sum(n_tup_ins), 0)::bigint, coalesce(sum(n_tup_upd), 0)::bigint,
       coalesce(sum(n_tup_del), 0)::bigint, coalesce(sum(n_tup_hot_upd), 0)::bigint
  from pg_stat_user_tables where schemaname = any(%s)
"""
_FUNCTION_CALLS = "select coalesce(sum(calls), 0)::bigint from pg_stat_user_functions"


def _counters(conn: psycopg.Connection[Any], schemas: list[str]) -> tuple[int, ...]:
    conn.execute("select pg_stat_clear_snapshot()")
    writes = conn.execute(_TABLE_WRITES, [schemas]).fetchone()
    calls = conn.execute(_FUNCTION_CALLS).fetchone()
    assert writes is not None and calls is not None
    return (*(int(value) for value in writes), int(calls[0]))


def _session_settings(conn: psycopg.Connection[Any], statements: bool) -> dict[str, str]:
    """``track_functions = all`` (and pg_stat_statements' nested tracking) for this session, when the
    role may set them (superuser); what each ended up as."""
    got: dict[str, str] = {}
    wanted = [("track_functions", "all")] + ([("pg_stat_statements.track", "all")] if statements else [])
    for name, value in wanted:
        try:
            with conn.transaction():
                conn.execute(
                    sql.SQL("set {} = {}").format(sql.Identifier(*name.split(".")), sql.Literal(value))
                )
        except psycopg.Error:
            pass
        row = conn.execute(sql.SQL("show {}").format(sql.Identifier(*name.split(".")))).fetchone()
        got[name] = str(row[0]) if row else "?"
    return got


def _replay_engine(url: str) -> Callable[[psycopg.Connection[Any]], None]:
    from bench.queue_access import one_chain

    with connect(url) as conn:
        worker = uuid.uuid4()
        conn.execute(
            "insert into pgflow.workers (worker_id, queue_name, function_name)"
            " values (%s, %s, 'bench floor')",
            [worker, CHAIN_FLOW.slug],
        )
        row = conn.execute(
            "select generation from pgflow.flows where flow_slug = %s", [CHAIN_FLOW.slug]
        ).fetchone()
        assert row is not None
        generation = row[0]

    def chain(conn: psycopg.Connection[Any]) -> None:
        one_chain(conn, worker, generation)

    return chain


def profile(url: str, chains: int, *, inspect: bool, settle: bool = True) -> dict[str, Any]:
    """Statements, transactions, function calls, rows written and WAL per chain of the floor and of the
    engine's chain SQL, each replayed on one connection with no worker running; pg_stat_statements'
    counts too when it is loaded."""
    statements_ok, why = stat_statements(url)
    out: dict[str, Any] = {
        "chains": chains,
        "pg_stat_statements": statements_ok,
        "missing": [] if statements_ok else [f"nested statement counts (pg_stat_statements: {why})"],
        "sides": {},
    }
    sides: list[tuple[str, list[str], int, Callable[[], Callable[[psycopg.Connection[Any]], None]]]] = [
        ("floor", [SCHEMA], 4, lambda: _floor_runner(url)),
        ("engine (chain SQL replayed)", ["pgflow", "pgmq"], 6, lambda: _replay_engine(url)),
    ]
    for name, schemas, statements_per_chain, make in sides:
        run_chain = make()
        if settle:
            vacuum_analyze(url)
        with connect(url, "pgflow bench floor profile") as meter_conn:
            before = _counters(meter_conn, schemas)
            wal = WalMeter(meter_conn, inspect).start()
            with psycopg.connect(url, autocommit=True, application_name="pgflow bench floor replay") as conn:
                settings = _session_settings(conn, statements_ok)
                if statements_ok:
                    conn.execute("select pg_stat_statements_reset()")
                for _ in range(chains):
                    run_chain(conn)
            time.sleep(0.3)  # the closed session's statistics are flushed as it exits
            counted = _statement_counts(meter_conn, chains) if statements_ok else {}
            used = wal.stop()
            after = _counters(meter_conn, schemas)
            tasks = chains * STEPS
            ins, upd, dele, hot, calls = (b - a for a, b in zip(before, after, strict=True))
            side: dict[str, Any] = {
                "statements_sent_per_chain": statements_per_chain,
                "transactions_per_chain": statements_per_chain,
                "rows_inserted_per_chain": round(ins / chains, 2),
                "rows_updated_per_chain": round(upd / chains, 2),
                "hot_updates_per_chain": round(hot / chains, 2),
                "rows_deleted_per_chain": round(dele / chains, 2),
                "function_calls_per_chain": round(calls / chains, 2)
                if settings.get("track_functions") == "all"
                else None,
                "settings": settings,
                **used.per(tasks),
                "wal_records_per_task_by_type": {
                    kind: round(count / tasks, 2) for kind, count in list(used.by_type.items())[:8]
                },
            }
            side.update(counted)
            out["sides"][name] = side
    if not any(side["function_calls_per_chain"] is not None for side in out["sides"].values()):
        out["missing"].append("function calls (track_functions = all needs a superuser session)")
    if not inspect:
        out["missing"].append("WAL by record type, and WAL of this database alone (pg_walinspect)")
    return out


def _floor_runner(url: str) -> Callable[[psycopg.Connection[Any]], None]:
    with connect(url) as conn:
        hop = hop_statement(conn)

    def chain(conn: psycopg.Connection[Any]) -> None:
        conn.autocommit = False
        try:
            floor_chain(conn, hop)
        finally:
            conn.autocommit = True

    return chain


def _statement_counts(conn: psycopg.Connection[Any], chains: int) -> dict[str, Any]:
    row = conn.execute(
        "select coalesce(sum(calls) filter (where toplevel), 0),"
        " coalesce(sum(calls) filter (where not toplevel), 0), coalesce(sum(wal_records), 0)"
        " from pg_stat_statements"
        " where dbid = (select oid from pg_database where datname = current_database())"
        " and query not ilike '%pg_stat_statements%' and query not ilike 'set %'"
        " and query not ilike 'show %'"
    ).fetchone()
    assert row is not None
    return {
        "pgss_top_level_statements_per_chain": round(int(row[0]) / chains, 2),
        "pgss_nested_statements_per_chain": round(int(row[1]) / chains, 2),
        "pgss_wal_records_per_chain": round(int(row[2]) / chains, 2),
    }


# The whole comparison ----------------------------------------------------------------------------


@dataclass(frozen=True)
class FloorSizes:
    chains: int = 200
    """Floor chains and engine chains measured (after warm-ups)."""
    raw_cycles: int = 40
    """Raw PGMQ cycles of 100 messages."""
    one_step_runs: int = 2000
    rounds: int = 4
    """The floor's and the engine's chains alternate in this many rounds (each round starting with the
    other one), so that a change of load on the machine hits both alike."""
    profile_chains: int = 50
    timeout: float = 300.0
    settle: bool = True
    """``VACUUM (ANALYZE)`` and checkpoint before each measurement, as the bench's other phases do."""


FULL = FloorSizes()
QUICK = FloorSizes(
    chains=40, rounds=2, raw_cycles=20, one_step_runs=200, profile_chains=5, timeout=120.0, settle=False
)
"""Enough work for each CPU figure to span a few of the kernel's 10 ms ticks; the figures mean little."""


@dataclass
class Comparison:
    floor: Measured
    engine_chain: Measured
    engine_one: Measured
    raw: Measured
    profile: dict[str, Any]
    walinspect: bool


def compare(
    url: str,
    sizes: FloorSizes,
    sampler: RssSampler,
    log_dir: Path,
    worker_args: list[str],
    say: Callable[[str], None] = print,
) -> Comparison:
    """Raw PGMQ, the floor, the engine's chain and 1-step task, then the hop profile, in that order."""
    inspect = install_walinspect(url)
    create_tables(url)
    if sizes.settle:
        vacuum_analyze(url)
    say("  raw PGMQ on one connection: CPU and WAL per message")
    raw = raw_per_message(url, sizes.raw_cycles, inspect=inspect)
    if sizes.settle:
        vacuum_analyze(url)
    say(
        f"  floor and engine: {sizes.chains} chains each, one at a time, in {sizes.rounds} interleaved rounds"
    )
    floor = Measured("floor", items=0, tasks=0)
    chain = Measured("engine chain", items=0, tasks=0)
    per_round = max(1, sizes.chains // sizes.rounds)
    with WorkerGroup(
        url=url, flow_slug=CHAIN_FLOW.slug, count=1, log_dir=log_dir, sampler=sampler, extra_args=worker_args
    ) as group:
        group.wait_registered(timeout=60)
        time.sleep(0.2)
        worker = FloorWorker(url, inspect)
        engine = EngineChains(url, group, inspect)
        try:
            worker.warm_up(10)
            engine.warm_up(3)
            sides: list[tuple[Callable[[int, Measured], None], Measured]] = [
                (worker.batch, floor),
                (engine.batch, chain),
            ]
            for _ in range(sizes.rounds):
                for run_batch, into in sides:
                    run_batch(per_round, into)
                sides.reverse()
        finally:
            worker.close()
            engine.close()
    if sizes.settle:
        vacuum_analyze(url)
    say(f"  engine: {sizes.one_step_runs} 1-step runs end to end, one worker")
    with WorkerGroup(
        url=url, flow_slug=ONE_FLOW.slug, count=1, log_dir=log_dir, sampler=sampler, extra_args=worker_args
    ) as group:
        group.wait_registered(timeout=60)
        time.sleep(0.2)
        one = engine_one_step(url, group, sizes.one_step_runs, inspect=inspect, timeout=sizes.timeout)
    say(f"  hop profile: {sizes.profile_chains} chains of each, replayed on one connection")
    hops = profile(url, sizes.profile_chains, inspect=inspect, settle=sizes.settle)
    return Comparison(
        floor=floor, engine_chain=chain, engine_one=one, raw=raw, profile=hops, walinspect=inspect
    )


# Figures and targets -----------------------------------------------------------------------------

SECTION = "floor reference (3-step chain, idle worker)"
RATIOS = "ratios to the floor and to raw PGMQ (same run)"

TARGETS = (
    Target("chain p50 vs the floor's", "floor_engine_chain_p50_ms", "<=", 1.5, versus="floor_chain_p50_ms"),
    Target("chain p95 vs the floor's", "floor_engine_chain_p95_ms", "<=", 2.0, versus="floor_chain_p95_ms"),
    Target(
        "backend CPU per 1-step task vs raw PGMQ per message",
        "floor_engine_one_cpu_ms_per_task",
        "<=",
        2.5,
        versus="floor_raw_cpu_ms_per_message",
    ),
    Target(
        "backend CPU per chain vs the floor's",
        "floor_engine_cpu_ms_per_chain",
        "<=",
        2.0,
        versus="floor_cpu_ms_per_chain",
    ),
    Target(
        "WAL records per task vs the floor's",
        "floor_engine_wal_records_per_task",
        "<=",
        1.5,
        versus="floor_wal_records_per_task",
    ),
)
"""Issue 38's targets against the floor reference; reported, never asserted."""


def figures(found: Comparison) -> list[Figure]:
    """The comparison's figures and its ratios (engine / floor, engine / raw PGMQ)."""
    out: list[Figure] = []

    def add(key: str, label: str, value: float | None, unit: str, **detail: Any) -> None:
        if value is not None and value > 0:
            out.append(Figure(key, SECTION, label, value, unit, is_rate=False, detail=detail))

    def side(measured: Measured) -> dict[str, Any]:
        wal = {} if measured.wal is None else measured.wal.per(measured.tasks)
        return {"items": measured.items, "tasks": measured.tasks, **wal, **measured.detail}

    floor, chain, one, raw = found.floor, found.engine_chain, found.engine_one, found.raw
    for key, who, measured in (("floor", "floor", floor), ("floor_engine", "engine", chain)):
        add(
            f"{key}_chain_p50_ms",
            f"{who}: chain p50, start -> last hop committed",
            measured.percentile(50),
            "ms",
            **side(measured),
        )
        add(f"{key}_chain_p95_ms", f"{who}: chain p95", measured.percentile(95), "ms")
        add(
            f"{key}_cpu_ms_per_chain",
            f"{who}: backend CPU per chain",
            measured.cpu_ms_per_item,
            "ms",
            **side(measured),
        )
        add(
            f"{key}_wal_records_per_task",
            f"{who}: WAL records per task",
            measured.wal_records_per_task,
            "records",
        )
        add(f"{key}_wal_bytes_per_task", f"{who}: WAL bytes per task", measured.wal_bytes_per_task, "bytes")
    add(
        "floor_engine_one_cpu_ms_per_task",
        "engine: backend CPU per 1-step task",
        one.cpu_ms_per_item,
        "ms",
        **side(one),
    )
    add(
        "floor_engine_one_wal_records_per_task",
        "engine: WAL records per 1-step task",
        one.wal_records_per_task,
        "records",
        **side(one),
    )
    add(
        "floor_engine_one_wal_bytes_per_task",
        "engine: WAL bytes per 1-step task",
        one.wal_bytes_per_task,
        "bytes",
    )
    add(
        "floor_raw_cpu_ms_per_message",
        "raw PGMQ: backend CPU per message",
        raw.cpu_ms_per_item,
        "ms",
        **side(raw),
    )
    add(
        "floor_raw_wal_records_per_message",
        "raw PGMQ: WAL records per message",
        raw.wal_records_per_task,
        "records",
        **side(raw),
    )
    add("floor_raw_wal_bytes_per_message", "raw PGMQ: WAL bytes per message", raw.wal_bytes_per_task, "bytes")

    def ratio(key: str, label: str, top: float | None, bottom: float | None) -> None:
        if top is not None and bottom is not None and top > 0 and bottom > 0:
            out.append(Figure(key, RATIOS, label, top / bottom, "x", is_rate=False))

    ratio("floor_ratio_chain_p50", "engine / floor: chain p50", chain.percentile(50), floor.percentile(50))
    ratio("floor_ratio_chain_p95", "engine / floor: chain p95", chain.percentile(95), floor.percentile(95))
    ratio(
        "floor_ratio_cpu_chain",
        "engine / floor: backend CPU per chain",
        chain.cpu_ms_per_item,
        floor.cpu_ms_per_item,
    )
    ratio(
        "floor_ratio_wal_records",
        "engine / floor: WAL records per task",
        chain.wal_records_per_task,
        floor.wal_records_per_task,
    )
    ratio(
        "floor_ratio_wal_bytes",
        "engine / floor: WAL bytes per task",
        chain.wal_bytes_per_task,
        floor.wal_bytes_per_task,
    )
    ratio(
        "floor_ratio_cpu_one_raw",
        "engine 1-step task / raw PGMQ message: backend CPU",
        one.cpu_ms_per_item,
        raw.cpu_ms_per_item,
    )
    ratio(
        "floor_ratio_wal_one_raw",
        "engine 1-step task / raw PGMQ message: WAL records",
        one.wal_records_per_task,
        raw.wal_records_per_task,
    )
    ratio(
        "floor_ratio_wal_chain_raw",
        "engine chain task / raw PGMQ message: WAL records",
        chain.wal_records_per_task,
        raw.wal_records_per_task,
    )
    ratio(
        "floor_ratio_wal_floor_raw",
        "floor task / raw PGMQ message: WAL records",
        floor.wal_records_per_task,
        raw.wal_records_per_task,
    )
    return out
