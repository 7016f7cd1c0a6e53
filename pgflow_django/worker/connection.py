"""The worker's dedicated psycopg connections, and the statements (``pgflow_django.worker.queries``) each
role runs.

Claims, completions and heartbeats never share Django's per-thread connections, so they never wait
behind a handler's transaction, and the worker's connection count stays fixed (docs: concurrency + 3).
A connection that breaks is dropped and reopened on next use; the caller decides when to retry.
"""

from __future__ import annotations

import contextlib
import json
import logging
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

import psycopg
from psycopg import sql
from psycopg.rows import dict_row

from pgflow_django.db import queries as db_queries
from pgflow_django.db.query import Query, Value, fetch_value
from pgflow_django.flows.slugs import version_of
from pgflow_django.runs.encoding import NotDecodable, clean_text, decode_json
from pgflow_django.worker import queries

logger = logging.getLogger("pgflow_django.worker")

R = TypeVar("R")


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
    priority: int = 0
    """Its message's claim priority: held tasks wait for a thread in this order (higher first)."""
    trace_context: Any = None
    """Its run's recorded trace context, read by a traced claim (None: none recorded, or not read)."""

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
class WorkerRegistration:
    """What a worker writes to ``pgflow.workers`` and ``pgflow.worker_support``."""

    worker_id: uuid.UUID
    queue: str
    """The one queue the worker polls, or ``*`` when it polls several (``support_queues`` says which)."""
    function_name: str
    support: tuple[tuple[str, str], ...]
    """The exact (flow_slug, step_slug) pairs the worker runs."""
    support_queues: tuple[str, ...] = ()
    """The queue of each pair of ``support`` (empty: ``queue`` for all)."""


@dataclass(frozen=True)
class HandOffScope:
    """What a completion may hand this worker: tasks on ``queue`` of the (flow, step) pairs it runs,
    at the flow generations it compiled against."""

    queue: str
    worker_id: uuid.UUID
    support: tuple[tuple[str, str], ...]
    generations: dict[str, int]
    traced: bool = False
    """Whether handed tasks carry their runs' trace contexts (the worker records spans)."""


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

    def _rows(self, query: str | sql.Composed, params: Any = None) -> list[dict[str, Any]]:
        with self.conn.cursor(row_factory=dict_row) as cursor:
            cursor.execute(query, params)
            return cursor.fetchall() if cursor.description is not None else []

    def _fetch(self, query: Query[R], params: Any = None, **identifiers: str) -> list[R]:
        rows = self._rows(query.statement(**identifiers), params)
        return [query.row(**row) for row in rows]

    def _value(self, query: Query[Value], params: Any = None) -> Any:
        rows = self._fetch(query, params)
        return rows[0].value if rows else None

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
        traced: bool = False,
    ) -> Claim:
        """Read and claim; ``shared_support`` switches to the shared-queue claim with that support set.
        ``generations`` (flow slug -> the generation compiled against) makes a replaced flow stop the read;
        ``traced`` returns each claimed task's run's trace context with it."""
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
        query = queries.CLAIM_TRACED if traced else queries.CLAIM
        if shared_support is not None:
            query = queries.CLAIM_SHARED_TRACED if traced else queries.CLAIM_SHARED
            params["flows"] = [flow for flow, _ in shared_support]
            params["steps"] = [step for _, step in shared_support]
            params["families"] = sorted({version_of(flow) for flow, _ in shared_support})
        rows = self._fetch(query, params, table=queue_table)
        if not rows:
            return Claim(read_count=0, tasks=[], next_visible=None)
        tasks = _by_priority(_claimed_task(row, queue) for row in rows if row.outcome == "claimed")
        unclaimed: dict[str, list[int]] = {}
        for row in rows:
            if row.outcome is not None and row.outcome != "claimed":
                unclaimed.setdefault(row.outcome, []).append(int(row.message_id or 0))
        first = rows[0]
        next_visible = None if first.next_visible is None else float(first.next_visible)
        if "deferred" in unclaimed:
            next_visible = self._next_deferred(queue, next_visible)
        return Claim(
            read_count=int(first.read_count),
            tasks=tasks,
            next_visible=next_visible,
            unclaimed=unclaimed,
            stale=tuple(first.stale_flows or ()),
        )

    def _next_deferred(self, queue: str, next_visible: float | None) -> float | None:
        """A claim that deferred tasks (a concurrency or rate limit) polls again when the first of them
        is due: a rate-limited task's token comes at a time no notification announces."""
        seconds = self._value(queries.NEXT_DEFERRED, [queue])
        if seconds is None:
            return next_visible
        return float(seconds) if next_visible is None else min(next_visible, float(seconds))

    def claim_visibility(self, support: tuple[tuple[str, str], ...]) -> int | None:
        """The longest effective timeout + 2 s among the (flow, step) pairs: what the claim sets as
        visibility, so a read that hides its batch this long spares the claim a second write."""
        value = self._value(queries.CLAIM_VISIBILITY, _pairs(support))
        return None if value is None else int(value)

    def queue_table(self, queue: str) -> str:
        """PGMQ's table name for ``queue`` (lower-cased), which also names its insert channel."""
        return str(self._value(queries.QUEUE_TABLE, [queue]))

    def write_queue_access(self) -> list[str]:
        """The queues whose tables have PGMQ's layout, so the hot path reaches them by static SQL."""
        return list(self._value(queries.WRITE_QUEUE_ACCESS))

    def insert_notifications(self, queue: str, queue_table: str) -> tuple[bool, int]:
        """Whether inserts into the queue notify listeners, and PGMQ's throttle in ms (0: immediate).

        The engine installs a statement-level trigger of its own; PGMQ's row trigger may be there too.
        """
        row = self._fetch(queries.INSERT_NOTIFICATIONS, [queue_table, queue])[0]
        return bool(row.notifies), int(row.throttle_ms)

    def register(self, registration: WorkerRegistration) -> None:
        """Insert the worker row and its support set (the exact (flow, step) pairs it runs)."""
        self.heartbeat(registration)

    def pause(self, support: tuple[tuple[str, str], ...]) -> tuple[str, str, str | None] | None:
        """The pause holding one of the (flow, step) subscriptions: (what, reason, detail), or None.
        Which pause holds each is ``pgflow.subscription_pause``'s to say (a flow's pause holds all its
        steps); across subscriptions a fatal pause comes first, then the oldest."""
        pauses = self.pauses(support)
        if not pauses:
            return None
        pause = pauses[0]
        return pause.what, pause.reason, pause.detail

    def pauses(self, support: tuple[tuple[str, str], ...]) -> list[db_queries.Pause]:
        """Every pause holding one of the (flow, step) subscriptions, fatal ones first, then the oldest."""
        return self._fetch(queries.SUBSCRIPTIONS_PAUSE, _pairs(support))

    def shared_support(self, queue: str, flow_slugs: Sequence[str]) -> list[tuple[str, str]]:
        """The (flow, step) pairs that the persisted routes of ``flow_slugs`` send to ``queue``."""
        rows = self._fetch(queries.SHARED_SUPPORT, [queue, list(flow_slugs)])
        return [(row.flow_slug, row.step_slug) for row in rows]

    def heartbeat(self, registration: WorkerRegistration) -> bool:
        """Refresh the heartbeat (registering again, support set included, after a prune); True when
        an operator deprecated us."""
        return bool(
            self._value(
                queries.HEARTBEAT,
                {
                    "id": registration.worker_id,
                    "queue": registration.queue,
                    "name": registration.function_name,
                    "flows": [flow for flow, _ in registration.support],
                    "steps": [step for _, step in registration.support],
                    "queues": list(registration.support_queues)
                    or [registration.queue] * len(registration.support),
                },
            )
        )

    def cancelled_tasks(self, tasks: list[ClaimedTask]) -> set[tuple[uuid.UUID, str, int]]:
        """The keys of those of ``tasks`` whose run was cancelled (or failed) since they were claimed."""
        if not tasks:
            return set()
        rows = self._fetch(
            queries.CANCELLED_TASKS,
            [[t.run_id for t in tasks], [t.step_slug for t in tasks], [t.task_index for t in tasks]],
        )
        return {(row.run_id, row.step_slug, row.task_index) for row in rows}

    def mark_stopped(self, worker_id: uuid.UUID) -> None:
        self._fetch(queries.MARK_STOPPED, [worker_id])

    def requeue_stalled(self) -> list[db_queries.RecoveryCount] | None:
        """Run stalled-task recovery unless another caller is running it (then None).

        Raises ``psycopg.errors.LockNotAvailable`` when rows it needs stay busy past
        ``db_queries.STALLED_LOCK_TIMEOUT``; nothing is changed then, and the next pass tries again."""
        conn = self.conn
        with conn.transaction(), conn.cursor() as cursor:
            return db_queries.requeue_stalled(cursor, wait=False)

    def wake_waits(self) -> dict[str, int]:
        """End the due waits of event and sleep steps (``pgflow.wake_waits``): waits ended by outcome."""
        conn = self.conn
        with conn.transaction(), conn.cursor() as cursor:
            return db_queries.wake_waits(cursor)

    def create_history_partitions(self) -> int:
        """Create the missing future partitions of a partitioned history (0 on a plain install, when
        none is missing, or when another worker is creating them); ``LockNotAvailable`` when the
        tables stay busy past ``queries.HISTORY_PARTITIONS_LOCK_TIMEOUT`` (nothing changed)."""
        conn = self.conn
        with conn.transaction(), conn.cursor() as cursor:
            fetch_value(cursor, db_queries.SET_LOCK_TIMEOUT, [queries.HISTORY_PARTITIONS_LOCK_TIMEOUT])
            return int(fetch_value(cursor, queries.CREATE_HISTORY_PARTITIONS))

    def release(self, tasks: Sequence[ClaimedTask]) -> int:
        """Give claims back: each task still held (with an attempt left) is queued again and its
        message visible now, so another worker takes it without waiting for stalled recovery."""
        if not tasks:
            return 0
        return int(self._value(queries.RELEASE_TASKS, [_claim_items(tasks)]))

    def return_unstarted(self, tasks: Sequence[ClaimedTask]) -> int:
        """Give back claims whose handler never started: queued again, their attempts returned."""
        if not tasks:
            return 0
        return int(self._value(queries.RETURN_UNSTARTED_TASKS, [_claim_items(tasks)]))

    # -- completer -----------------------------------------------------------------------------

    def complete_tasks(self, items_json: str) -> list[queries.TaskOutcome]:
        return self._fetch(queries.COMPLETE_TASKS, [items_json])

    def complete_and_hand_off(
        self, items_json: str, scope: HandOffScope, slots: int
    ) -> tuple[list[queries.TaskOutcome], list[ClaimedTask]]:
        """``complete_tasks``, plus up to ``slots`` tasks the completion made ready, claimed for this
        worker in the same transaction."""
        rows = self._fetch(
            queries.COMPLETE_AND_HAND_OFF,
            {
                "items": items_json,
                "queue": scope.queue,
                "worker": scope.worker_id,
                "flows": [flow for flow, _ in scope.support],
                "steps": [step for _, step in scope.support],
                "gens": [scope.generations.get(flow) for flow, _ in scope.support],
                "slots": slots,
                "traced": scope.traced,
            },
        )
        outcomes = [
            queries.TaskOutcome(row.run_id, row.step_slug, row.task_index, row.outcome)
            for row in rows
            if row.outcome != "claimed"
        ]
        return outcomes, _by_priority(
            _claimed_task(row, scope.queue) for row in rows if row.outcome == "claimed"
        )

    def complete_task(self, task: ClaimedTask, output_json: str) -> str:
        return str(self._value(queries.COMPLETE_TASK, completion_args(task, output_json)))

    def fail_task(self, task: ClaimedTask, error_message: str, retry_delay: int | None) -> str:
        return str(
            self._value(
                queries.FAIL_TASK,
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

    def transitions(self, tasks: Sequence[ClaimedTask]) -> list[queries.Transition]:
        """What recording these tasks' results changed (``pgflow_django.signals``)."""
        return self._fetch(queries.TRANSITIONS, transition_args(tasks))

    def reject_task(self, task: ClaimedTask, error_message: str) -> str:
        """Fail the attempt with no retry: its input or output can never be handled."""
        return str(
            self._value(
                queries.REJECT_TASK,
                [task.run_id, task.step_slug, task.task_index, task.attempt, clean_text(error_message)],
            )
        )


def transition_args(tasks: Sequence[ClaimedTask]) -> list[list[Any]]:
    """The three parallel arrays ``queries.TRANSITIONS`` unnests."""
    return [[t.run_id for t in tasks], [t.step_slug for t in tasks], [t.task_index for t in tasks]]


def _pairs(support: tuple[tuple[str, str], ...]) -> list[list[str]]:
    """(flow, step) pairs as the two parallel arrays the statements unnest."""
    return [[flow for flow, _ in support], [step for _, step in support]]


def completion_args(task: ClaimedTask, output_json: str) -> list[Any]:
    """The arguments of ``queries.COMPLETE_TASK`` for one task and its encoded output."""
    return [task.run_id, task.step_slug, task.task_index, task.attempt, output_json]


def _claimed_task(row: queries.ClaimRow | queries.HandOffRow, queue: str) -> ClaimedTask:
    """One claimed row, its input decoded on its own: an input this process cannot decode fails only
    its own task (the claim has committed; raising here would strand the whole batch)."""
    value: Any = None
    problem: str | None = None
    if row.input is not None:
        try:
            value = decode_json(row.input)
        except NotDecodable as exc:
            problem = f"input not decodable: {exc.reason}"
    return ClaimedTask(
        flow_slug=cast(str, row.flow_slug),
        run_id=cast(uuid.UUID, row.run_id),
        step_slug=cast(str, row.step_slug),
        task_index=cast(int, row.task_index),
        message_id=cast(int, row.message_id),
        attempt=cast(int, row.attempt),
        input=value,
        queue=queue,
        input_error=problem,
        priority=row.priority or 0,
        trace_context=row.trace_context,
    )


def _by_priority(tasks: Iterable[ClaimedTask]) -> list[ClaimedTask]:
    """Higher priority first, the claim's order within a priority: the order they go to threads."""
    return sorted(tasks, key=lambda task: -task.priority)


def _claim_items(tasks: Sequence[ClaimedTask]) -> str:
    """The JSON array of claims (task key and attempt) that giving claims back takes."""
    return json.dumps(
        [
            {
                "run_id": str(t.run_id),
                "step_slug": t.step_slug,
                "task_index": t.task_index,
                "attempt": t.attempt,
            }
            for t in tasks
        ]
    )


def completion_item(task: ClaimedTask, output_json: str) -> str:
    """One element of ``complete_tasks``' JSON array, embedding the already-encoded output verbatim."""
    return (
        f'{{"run_id": "{task.run_id}", "step_slug": {json.dumps(task.step_slug)}, '
        f'"task_index": {int(task.task_index)}, "attempt": {int(task.attempt)}, "output": {output_json}}}'
    )
