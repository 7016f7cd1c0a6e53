"""The worker's own SQL, each caller on its own dedicated psycopg connection.

Claims, completions and heartbeats never share Django's per-thread connections, so they never wait
behind a handler's transaction, and the worker's connection count stays fixed (docs: concurrency + 3).
A connection that breaks is dropped and reopened on next use; the caller decides when to retry.
"""

from __future__ import annotations

import contextlib
import json
import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg import sql

from pgflow_django.encoding import NotDecodable, clean_text, decode_json

logger = logging.getLogger("pgflow_django.worker")

DJANGO_ONLY_OPTIONS = frozenset(
    {"isolation_level", "server_side_binding", "assume_role", "pool", "cursor_factory", "context"}
)
"""Keys of ``DATABASES[...]["OPTIONS"]`` that Django consumes itself and libpq would reject."""

STALLED_LOCK_KEY = "pgflow:requeue_stalled"
"""Advisory-lock name that lets one worker at a time run stalled-task recovery."""

STALLED_LOCK_TIMEOUT = "2s"
"""How long recovery waits for a row another transaction holds before it gives up until its next pass.

Recovery holds its runs' locks while it requeues their tasks; waiting without bound for a message a
claim holds would hold up every completion of those runs behind it (and keep vacuum from the queue)."""


def connection_params(using: str = "default") -> dict[str, Any]:
    """psycopg connection keywords built from Django's ``settings_dict`` for ``using``."""
    from django.db import connections

    settings_dict = connections[using].settings_dict
    params: dict[str, Any] = {
        key: value
        for key, value in (settings_dict.get("OPTIONS") or {}).items()
        if key not in DJANGO_ONLY_OPTIONS
    }
    if settings_dict.get("NAME"):
        params["dbname"] = settings_dict["NAME"]
    for key, name in (("USER", "user"), ("PASSWORD", "password"), ("HOST", "host"), ("PORT", "port")):
        if settings_dict.get(key):
            params[name] = str(settings_dict[key])
    return params


def connect(params: dict[str, Any], role: str) -> psycopg.Connection[Any]:
    """An autocommit connection named after its role, so operators can tell them apart in pg_stat_activity."""
    keywords = dict(params)
    keywords.setdefault("application_name", f"pgflow_worker {role}")
    keywords.setdefault("connect_timeout", 10)
    conn = psycopg.connect(autocommit=True, **keywords)
    conn.add_notice_handler(_log_server_warning)
    return conn


def _log_server_warning(diagnostic: psycopg.errors.Diagnostic) -> None:
    """The engine's SQL warns when it repairs something by itself (a message deleted because its id
    was already archived): psycopg drops notices unless handled, so the worker's log repeats them."""
    if diagnostic.severity_nonlocalized == "WARNING":
        logger.warning("database warning: %s", diagnostic.message_primary)


def first_line(exc: BaseException) -> str:
    """An error's first line: database errors carry multi-line details (and sometimes values) after it."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


PROGRAM_LIMIT_EXCEEDED = "54"
"""SQLSTATE class psycopg files under OperationalError, yet the same statement fails again (a jsonb
value past PostgreSQL's size limit, a statement too complex): retrying it would never end."""


def is_transient(exc: BaseException) -> bool:
    """True for errors worth retrying unchanged (lost connection, restart, deadlock, serialization),
    False when the statement itself is wrong and would fail again."""
    if isinstance(exc, psycopg.Error) and (exc.sqlstate or "").startswith(PROGRAM_LIMIT_EXCEEDED):
        return False
    return isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError)


@dataclass(frozen=True)
class ClaimedTask:
    """One row of ``pgflow.start_tasks``: a task this worker now holds, fenced by ``attempt``."""

    flow_slug: str
    run_id: uuid.UUID
    step_slug: str
    task_index: int
    message_id: int
    attempt: int
    input: Any
    queue: str = ""
    """The queue the message was read from ('' means the flow's default queue)."""
    input_error: str | None = None
    """Why ``input`` could not be decoded (then None): the task fails alone, without a retry."""

    @property
    def key(self) -> tuple[uuid.UUID, str, int]:
        return (self.run_id, self.step_slug, self.task_index)

    def describe(self) -> str:
        """Identity for logs: never the input, message ids as decimal strings."""
        return (
            f"queue={self.queue or self.flow_slug.lower()} msg_id={self.message_id} run={self.run_id} "
            f"step={self.step_slug}[{self.task_index}] attempt={self.attempt}"
        )


@dataclass(frozen=True)
class Registration:
    """What a worker writes to ``pgflow.workers`` and ``pgflow.worker_support``."""

    worker_id: uuid.UUID
    queue: str
    function_name: str
    support: tuple[tuple[str, str], ...]
    """The exact (flow_slug, step_slug) pairs the worker runs on its queue."""


@dataclass(frozen=True)
class Claim:
    read_count: int
    tasks: list[ClaimedTask]
    next_visible: float | None
    """Seconds until the earliest message this read left behind becomes visible (None: queue empty)."""
    unclaimed: dict[str, list[int]] = field(default_factory=dict)
    """Message ids the claim did not turn into tasks, by outcome (foreign, fatal, started, ...)."""
    stale: tuple[str, ...] = ()
    """Flows replaced or recompiled since the worker compiled them: the claim read nothing."""

    @property
    def fatal(self) -> list[int]:
        return self.unclaimed.get("fatal", [])


_CLAIM = """
with stale as materialized (
  select coalesce(array_agg(g.flow_slug order by g.flow_slug), '{{}}'::text[]) as flows
    from unnest(%(gen_flows)s::text[], %(gens)s::bigint[]) as g(flow_slug, generation)
   where not exists (select 1 from pgflow.flows as f
                      where f.flow_slug = g.flow_slug and f.generation = g.generation)
), msgs as materialized (
  update pgmq.{table} as m
     set last_read_at = clock_timestamp(), vt = clock_timestamp() + make_interval(secs => %(vt)s),
         read_ct = m.read_ct + 1
    from (select msg_id from pgmq.{table}
           where vt <= clock_timestamp() and cardinality((select flows from stale)) = 0
           order by msg_id
           limit %(qty)s
             for update skip locked) as visible
   where m.msg_id = visible.msg_id
  returning m.msg_id
), ids as (
  select coalesce(array_agg(msg_id order by msg_id), '{{}}'::bigint[]) as arr, count(*) as n from msgs
), next_visible as (
  select (select extract(epoch from q.vt - clock_timestamp())::float8
            from pgmq.{table} as q
           where q.msg_id <> all(ids.arr)
           order by q.vt
           limit 1) as seconds
    from ids
)
select ids.n, next_visible.seconds,
       t.flow_slug, t.run_id, t.step_slug, t.task_index, t.message_id, t.attempt, t.input::text, t.outcome,
       stale.flows
from ids cross join next_visible cross join stale
left join lateral pgflow.start_tasks(%(queue)s, %(flow)s, ids.arr, %(worker)s, %(step)s) as t
       on cardinality(ids.arr) > 0
"""
"""Read and claim in one statement: one round trip, and a crash in between leaves nothing hidden.

The read is ``pgmq.read``'s own statement written out for this queue's table: PGMQ builds it as dynamic
SQL, planned again on every call, while psycopg prepares this statement on its connection once it has
run a few times (the planning was most of a one-message claim's cost).

``next_visible`` (seen from the statement's snapshot, so without the messages it just read) says when
the earliest hidden message (a retry or start delay) becomes visible, from the queue's ``vt`` index
(the first entry not just read), so its cost does not grow with the backlog: notifications fire on insert
only, so a delayed message needs a timed read to be picked up on time.

``stale`` lists the worker's flows whose generation in ``pgflow.flows`` is no longer the one it compiled
against (replaced or recompiled since): then nothing is read. The check and the read share the
statement's snapshot, and a replaced flow's new messages are written by transactions that commit after
the replacement, so a read that could see one would also see the new generation: an old-shape worker is
never handed a task of the new shape.
"""

_CLAIM_SHARED = _CLAIM.replace(
    "pgflow.start_tasks(%(queue)s, %(flow)s, ids.arr, %(worker)s, %(step)s)",
    "pgflow.start_shared_tasks(%(queue)s, ids.arr, %(worker)s, %(flows)s::text[], %(steps)s::text[])",
)
"""The same statement on a shared queue: the claim carries the worker's exact support set."""


class Engine:
    """One dedicated connection and the statements of one role (supervisor or completer)."""

    def __init__(self, params: dict[str, Any], role: str) -> None:
        self.params = params
        self.role = role
        self._conn: psycopg.Connection[Any] | None = None

    @property
    def conn(self) -> psycopg.Connection[Any]:
        if self._conn is None or self._conn.closed:
            self._conn = connect(self.params, self.role)
        return self._conn

    @property
    def connection(self) -> psycopg.Connection[Any] | None:
        """The current connection, if any, without opening one."""
        return self._conn

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(psycopg.Error):
                conn.close()

    def recover(self, exc: BaseException) -> bool:
        """Drop a broken connection (the next call reconnects); True when ``exc`` is worth retrying."""
        conn = self._conn
        if conn is not None and (conn.closed or conn.broken):
            self.close()
        return is_transient(exc)

    def _rows(self, query: str | sql.Composed, params: Any = None) -> list[tuple[Any, ...]]:
        with self.conn.cursor() as cursor:
            cursor.execute(query, params)
            return cursor.fetchall() if cursor.description is not None else []

    def _scalar(self, query: str | sql.Composed, params: Any = None) -> Any:
        rows = self._rows(query, params)
        return rows[0][0] if rows else None

    # -- supervisor ----------------------------------------------------------------------------

    def claim(
        self,
        flow_slug: str,
        queue: str,
        queue_table: str,
        worker_id: uuid.UUID,
        vt: int,
        qty: int,
        step_slug: str | None = None,
        shared_support: tuple[tuple[str, str], ...] | None = None,
        generations: dict[str, int] | None = None,
    ) -> Claim:
        """Read and claim; ``shared_support`` switches to the shared-queue claim with that support set.
        ``generations`` (flow slug -> the generation compiled against) makes a replaced flow stop the read."""
        params: dict[str, Any] = {
            "queue": queue,
            "vt": vt,
            "qty": qty,
            "flow": flow_slug,
            "worker": worker_id,
            "step": step_slug,
            "gen_flows": list(generations or ()),
            "gens": list((generations or {}).values()),
        }
        if shared_support is None:
            query = sql.SQL(_CLAIM).format(table=sql.Identifier(queue_table))
        else:
            query = sql.SQL(_CLAIM_SHARED).format(table=sql.Identifier(queue_table))
            params["flows"] = [flow for flow, _ in shared_support]
            params["steps"] = [step for _, step in shared_support]
        rows = self._rows(query, params)
        tasks = [_claimed_task(row, queue) for row in rows if row[9] == "claimed"]
        unclaimed: dict[str, list[int]] = {}
        for row in rows:
            if row[9] is not None and row[9] != "claimed":
                unclaimed.setdefault(row[9], []).append(int(row[6]))
        if not rows:
            return Claim(read_count=0, tasks=tasks, next_visible=None)
        next_visible = None if rows[0][1] is None else float(rows[0][1])
        return Claim(
            read_count=int(rows[0][0]),
            tasks=tasks,
            next_visible=next_visible,
            unclaimed=unclaimed,
            stale=tuple(rows[0][10] or ()),
        )

    def claim_visibility(self, support: tuple[tuple[str, str], ...]) -> int | None:
        """The longest effective timeout + 2 s among the (flow, step) pairs: what the claim sets as
        visibility, so a read that hides its batch this long spares the claim a second write."""
        value = self._scalar(
            """
            select max(coalesce(s.opt_timeout, f.opt_timeout)) + 2
              from unnest(%s::text[], %s::text[]) as p(flow_slug, step_slug)
              join pgflow.steps as s on s.flow_slug = p.flow_slug and s.step_slug = p.step_slug
              join pgflow.flows as f on f.flow_slug = s.flow_slug
            """,
            [[flow for flow, _ in support], [step for _, step in support]],
        )
        return None if value is None else int(value)

    def queue_table(self, queue: str) -> str:
        """PGMQ's table name for ``queue`` (lower-cased), which also names its insert channel."""
        return str(self._scalar("select pgmq.format_table_name(%s, 'q')", [queue]))

    def insert_notifications(self, queue: str, queue_table: str) -> tuple[bool, int]:
        """Whether inserts into the queue notify listeners, and PGMQ's throttle in ms (0: immediate).

        The engine installs a statement-level trigger of its own; PGMQ's row trigger may be there too.
        """
        rows = self._rows(
            """
            select exists (
                     select 1 from pg_trigger
                      where tgrelid = to_regclass(format('pgmq.%%I', %s::text))
                        and tgname in ('pgflow_notify_insert', 'trigger_notify_queue_insert_listeners')
                        and not tgisinternal),
                   coalesce((select throttle_interval_ms from pgmq.notify_insert_throttle
                              where queue_name = %s), 0)
            """,
            [queue_table, queue],
        )
        return bool(rows[0][0]), int(rows[0][1])

    def register(self, registration: Registration) -> None:
        """Insert the worker row and its support set (the exact (flow, step) pairs it runs)."""
        self.heartbeat(registration)

    def pause(self, support: tuple[tuple[str, str], ...]) -> tuple[str, str, str | None] | None:
        """The first pause holding one of the (flow, step) subscriptions: (what, reason, detail), or None.
        A flow's pause holds all its steps."""
        rows = self._rows(
            """
            select 'flow=' || p.flow_slug
                   || case when p.step_slug = '' then '' else ' step=' || p.step_slug end,
                   p.reason, p.detail
              from unnest(%s::text[], %s::text[]) as s(flow_slug, step_slug)
              join pgflow.worker_pauses as p
                on p.flow_slug = s.flow_slug and p.step_slug in ('', s.step_slug)
             order by (p.reason = 'fatal') desc, p.paused_at
             limit 1
            """,
            [[flow for flow, _ in support], [step for _, step in support]],
        )
        return None if not rows else (str(rows[0][0]), str(rows[0][1]), rows[0][2])

    def shared_support(self, queue: str, flow_slugs: Sequence[str]) -> list[tuple[str, str]]:
        """The (flow, step) pairs that the persisted routes of ``flow_slugs`` send to ``queue``."""
        rows = self._rows(
            "select flow_slug, step_slug from pgflow.steps where queue_name = %s and flow_slug = any(%s)"
            " order by flow_slug, step_index",
            [queue, list(flow_slugs)],
        )
        return [(str(row[0]), str(row[1])) for row in rows]

    def heartbeat(self, registration: Registration) -> bool:
        """Refresh the heartbeat (registering again, support set included, after a prune); True when
        an operator deprecated us."""
        return bool(
            self._scalar(
                """
                with worker as (
                  insert into pgflow.workers (worker_id, queue_name, function_name)
                  values (%(id)s, %(queue)s, %(name)s)
                  on conflict (worker_id) do update set last_heartbeat_at = now()
                  returning worker_id, deprecated_at is not null as deprecated, xmax = 0 as inserted
                ), support as (
                  insert into pgflow.worker_support (worker_id, flow_slug, step_slug)
                  select worker.worker_id, s.flow_slug, s.step_slug
                    from worker
                   cross join unnest(%(flows)s::text[], %(steps)s::text[]) as s(flow_slug, step_slug)
                   where worker.inserted
                  on conflict do nothing
                )
                select deprecated from worker
                """,
                {
                    "id": registration.worker_id,
                    "queue": registration.queue,
                    "name": registration.function_name,
                    "flows": [flow for flow, _ in registration.support],
                    "steps": [step for _, step in registration.support],
                },
            )
        )

    def mark_stopped(self, worker_id: uuid.UUID) -> None:
        self._rows(
            "update pgflow.workers set stopped_at = now(), last_heartbeat_at = now() where worker_id = %s",
            [worker_id],
        )

    def requeue_stalled(self) -> list[tuple[Any, ...]] | None:
        """Run stalled-task recovery unless another worker is running it (then None).

        Raises ``psycopg.errors.LockNotAvailable`` when rows it needs stay busy past
        ``STALLED_LOCK_TIMEOUT``; nothing is changed then, and the next pass tries again."""
        conn = self.conn
        with conn.transaction(), conn.cursor() as cursor:
            cursor.execute("select pg_try_advisory_xact_lock(hashtext(%s))", [STALLED_LOCK_KEY])
            row = cursor.fetchone()
            if not (row and row[0]):
                return None
            cursor.execute(f"set local lock_timeout = '{STALLED_LOCK_TIMEOUT}'")
            cursor.execute("select * from pgflow.requeue_stalled_tasks()")
            return cursor.fetchall()

    def release(self, tasks: Sequence[ClaimedTask]) -> int:
        """Give claims back: each task still held is queued again with its attempt returned and its
        message visible now, so another worker takes it without waiting for stalled recovery."""
        if not tasks:
            return 0
        items = [
            {
                "run_id": str(t.run_id),
                "step_slug": t.step_slug,
                "task_index": t.task_index,
                "attempt": t.attempt,
            }
            for t in tasks
        ]
        return int(
            self._scalar(
                "select count(*) from pgflow.release_tasks(%s::jsonb) where outcome = 'released'",
                [json.dumps(items)],
            )
        )

    # -- completer -----------------------------------------------------------------------------

    def complete_tasks(self, items_json: str) -> list[tuple[uuid.UUID, str, int, str]]:
        rows = self._rows(
            "select run_id, step_slug, task_index, outcome from pgflow.complete_tasks(%s::jsonb)",
            [items_json],
        )
        return [(row[0], row[1], row[2], row[3]) for row in rows]

    def complete_task(self, task: ClaimedTask, output_json: str) -> str:
        return str(
            self._scalar(
                "select pgflow.complete_task(%s, %s, %s, %s, %s::jsonb)",
                [task.run_id, task.step_slug, task.task_index, task.attempt, output_json],
            )
        )

    def fail_task(self, task: ClaimedTask, error_message: str, retry_delay: int | None) -> str:
        return str(
            self._scalar(
                "select pgflow.fail_task(%s, %s, %s, %s, %s, %s::integer)",
                [
                    task.run_id,
                    task.step_slug,
                    task.task_index,
                    task.attempt,
                    clean_text(error_message),
                    retry_delay,
                ],
            )
        )

    def reject_task(self, task: ClaimedTask, error_message: str) -> str:
        """Fail the attempt with no retry: its input or output can never be handled."""
        return str(
            self._scalar(
                "select pgflow.reject_task(%s, %s, %s, %s, %s)",
                [task.run_id, task.step_slug, task.task_index, task.attempt, clean_text(error_message)],
            )
        )


def _claimed_task(row: tuple[Any, ...], queue: str) -> ClaimedTask:
    """One claimed row, its input decoded on its own: an input this process cannot decode fails only
    its own task (the claim has committed; raising here would strand the whole batch)."""
    value: Any = None
    problem: str | None = None
    if row[8] is not None:
        try:
            value = decode_json(row[8])
        except NotDecodable as exc:
            problem = f"input not decodable: {exc.reason}"
    return ClaimedTask(
        flow_slug=row[2],
        run_id=row[3],
        step_slug=row[4],
        task_index=row[5],
        message_id=row[6],
        attempt=row[7],
        input=value,
        queue=queue,
        input_error=problem,
    )


def completion_item(task: ClaimedTask, output_json: str) -> str:
    """One element of ``complete_tasks``' JSON array, embedding the already-encoded output verbatim."""
    return (
        f'{{"run_id": "{task.run_id}", "step_slug": {json.dumps(task.step_slug)}, '
        f'"task_index": {int(task.task_index)}, "attempt": {int(task.attempt)}, "output": {output_json}}}'
    )
