"""The bench database: where it lives, creating it fresh, and the few queries every phase shares."""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse, urlunparse

import psycopg
from psycopg import sql

REPO_DIR = Path(__file__).resolve().parent.parent
DEFAULT_DATABASE = "pgflow_bench"


def server_url() -> str:
    """``DATABASE_URL`` when set, else the embedded PostgreSQL of this checkout (started when needed)."""
    url = os.environ.get("DATABASE_URL")
    if url:
        return url
    from testproject.embedded import database_url

    return database_url(REPO_DIR / ".pgdata")


def with_database(url: str, name: str) -> str:
    """The same server URL with another database name."""
    return urlunparse(urlparse(url)._replace(path=f"/{name}"))


def connect(url: str, application_name: str = "pgflow bench") -> psycopg.Connection[Any]:
    """An autocommit connection, named so it is recognisable in pg_stat_activity."""
    return psycopg.connect(url, autocommit=True, application_name=application_name)


def recreate_database(server: str, name: str) -> None:
    """Drop ``name`` (closing its sessions) and create it empty."""
    with connect(server) as conn:
        conn.execute(sql.SQL("drop database if exists {} with (force)").format(sql.Identifier(name)))
        conn.execute(sql.SQL("create database {}").format(sql.Identifier(name)))


def drop_database(server: str, name: str) -> None:
    with connect(server) as conn:
        conn.execute(sql.SQL("drop database if exists {} with (force)").format(sql.Identifier(name)))


def set_database_option(server: str, name: str, option: str, value: str) -> None:
    """``ALTER DATABASE ... SET``: applies to every connection opened afterwards."""
    with connect(server) as conn:
        conn.execute(
            sql.SQL("alter database {} set {} = {}").format(
                sql.Identifier(name), sql.Identifier(option), sql.Literal(value)
            )
        )


@dataclass(frozen=True)
class ServerInfo:
    """What the reader needs to judge the figures: version, durability settings, machine size."""

    version: str
    synchronous_commit: str
    fsync: str
    wal_sync_method: str
    shared_buffers: str
    cpu_count: int

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def server_info(url: str) -> ServerInfo:
    with connect(url) as conn:

        def show(name: str) -> str:
            row = conn.execute(sql.SQL("show {}").format(sql.Identifier(name))).fetchone()
            return str(row[0]) if row else "?"

        return ServerInfo(
            version=show("server_version"),
            synchronous_commit=show("synchronous_commit"),
            fsync=show("fsync"),
            wal_sync_method=show("wal_sync_method"),
            shared_buffers=show("shared_buffers"),
            cpu_count=os.cpu_count() or 1,
        )


@dataclass(frozen=True)
class Window:
    """A span of work as the database clocked it: first claim (or given start) to last run finished."""

    seconds: float
    runs: int
    tasks: int
    failed_runs: int

    @property
    def runs_per_second(self) -> float:
        return self.runs / self.seconds if self.seconds > 0 else 0.0

    @property
    def tasks_per_second(self) -> float:
        return self.tasks / self.seconds if self.seconds > 0 else 0.0


def unfinished(conn: psycopg.Connection[Any], run_ids: Sequence[uuid.UUID]) -> int:
    """How many of ``run_ids`` are still running."""
    row = conn.execute(
        "select count(*) from pgflow.runs where run_id = any(%s) and status = 'started'", [list(run_ids)]
    ).fetchone()
    return int(row[0]) if row else 0


def window(conn: psycopg.Connection[Any], run_ids: Sequence[uuid.UUID], since: Any = None) -> Window:
    """The work on ``run_ids``: from ``since`` (a server timestamp) or their first claim, to the last end."""
    row = conn.execute(
        """
        select coalesce(%s::timestamptz, (select min(t.started_at) from pgflow.step_tasks as t
                                           where t.run_id = any(%s))),
               max(coalesce(r.completed_at, r.failed_at)),
               count(*),
               count(*) filter (where r.status = 'failed'),
               (select count(*) from pgflow.step_tasks as t where t.run_id = any(%s))
          from pgflow.runs as r
         where r.run_id = any(%s)
        """,
        [since, list(run_ids), list(run_ids), list(run_ids)],
    ).fetchone()
    assert row is not None
    start, end, runs, failed, tasks = row
    seconds = (end - start).total_seconds() if start is not None and end is not None else 0.0
    return Window(seconds=seconds, runs=int(runs), tasks=int(tasks), failed_runs=int(failed))


def clock(conn: psycopg.Connection[Any]) -> Any:
    """The server's wall clock now (``clock_timestamp()``), to start a window the database measures."""
    row = conn.execute("select clock_timestamp()").fetchone()
    assert row is not None
    return row[0]


_settle_writes = True


def analyze_only_between_phases() -> None:
    """Make ``vacuum_analyze`` only ANALYZE from now on (no VACUUM, no checkpoint), for smoke runs
    (``--quick``): their figures mean nothing, and the VACUUM of every table took 4 to 15 s per phase
    on a busy server (most of a quick run)."""
    global _settle_writes
    _settle_writes = False


def vacuum_analyze(url: str) -> None:
    """Settle the tables between phases so each phase starts from comparable statistics, and write
    the dirty pages out (a checkpoint, when the role may: superuser or pg_checkpoint) so no phase pays
    for the writes of the one before. The empty partitions of a partitioned history are left alone,
    as autovacuum leaves them (``analyze_like_autovacuum``)."""
    with connect(url) as conn:
        analyze_like_autovacuum(conn, vacuum=_settle_writes)
        if _settle_writes:
            with contextlib.suppress(psycopg.errors.InsufficientPrivilege):
                conn.execute("checkpoint")


def analyze_like_autovacuum(conn: psycopg.Connection[Any], *, vacuum: bool = False) -> None:
    """ANALYZE (or VACUUM (ANALYZE)) every table autovacuum would: not the empty partitions of a
    partitioned history (an ANALYZE that sees one empty makes the worker's plans read it whole once it
    fills, see docs/operations.md), nor a partitioned parent (its ANALYZE reaches every partition)."""
    rows = conn.execute(
        "select c.oid::regclass::text, c.relispartition from pg_class as c"
        " where c.relkind in ('r', 'm') and c.relpersistence <> 't'"
        "   and c.relnamespace not in ('pg_catalog'::regnamespace, 'information_schema'::regnamespace)"
        " order by 1"
    ).fetchall()
    command = "vacuum (analyze) {}" if vacuum else "analyze {}"
    for name, is_partition in rows:
        table = sql.SQL(name)
        if is_partition and _is_empty(conn, table):
            continue
        conn.execute(sql.SQL(command).format(table))


def _is_empty(conn: psycopg.Connection[Any], table: sql.Composable) -> bool:
    return conn.execute(sql.SQL("select not exists (select from {})").format(table)).fetchone() == (True,)
