"""Ledger harness and invariant check of the reliability suite (issue 8, item 1).

Handlers of the reliability flows (``tests/ledger_flows.py``) write two ledgers:

- ``ledger_execution``: one row per handler call, committed on a connection of its own, outside the
  completion transaction, so it survives a rollback, a kill or a stale completion. It counts what
  really ran.
- ``ledger_effect``: one row per task, written on the handler's Django connection inside an
  ``atomic=True`` handler's transaction, so it commits with ``complete_task`` or not at all. Its
  primary key makes a second effect of the same task an error instead of a silent duplicate.

``assert_invariants(cursor)`` then checks the engine's own state for every flow in the database, and
``assert_exactly_once(cursor, flow_slug)`` ties the ledgers to the tasks. Both take any DB-API cursor
(Django's or a raw psycopg one), so scenarios on a private cluster use them too.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterable
from typing import Any, Protocol

from tests.support.db import tuples

LEDGER_DDL = """
create table if not exists public.ledger_execution (
  id bigserial primary key,
  flow_slug text not null,
  run_id uuid not null,
  step_slug text not null,
  task_index integer not null,
  attempt integer not null,
  worker_pid integer not null,
  at timestamptz not null default clock_timestamp()
);
alter table public.ledger_execution add column if not exists call_id uuid;
create unique index if not exists ledger_execution_call_id on public.ledger_execution (call_id);
create table if not exists public.ledger_effect (
  flow_slug text not null,
  run_id uuid not null,
  step_slug text not null,
  task_index integer not null,
  attempt integer not null,
  worker_pid integer not null,
  at timestamptz not null default clock_timestamp(),
  primary key (run_id, step_slug, task_index)
);
"""

LEDGER_FLOW = "rel_ledger"
OUTPUT_FLOWS = ("rel_outputs", "rel_outputs_atomic")
PLAIN_FLOW = "rel_plain"
LATE_FLOW = "rel_late"
FAIL_FLOW = "rel_fail"
DOOMED_FLOW = "rel_doomed"
STEP_FLOW = "rel_steps"
ROUTED_FLOWS = ("rel_routed", "rel_routed_b")
SHARED_QUEUE = "rel_shared"
POISON_FLOW = "rel_poison"
"""Atomic root step ``effect`` (both ledgers) -> atomic ``after``; what ``effect`` does is chosen by its
input (``POISON_KINDS``): the poison fault scenarios (issue 15)."""
POISON_FLOWS = (POISON_FLOW, "rel_poison_plain", "rel_poison_async")
"""The same kinds with plain handlers (execution ledger only) and with an async root handler."""
PRIORITY_FLOW = "rel_priority"
"""One step that records its execution and sleeps briefly: a backlog of mixed priorities drained by
real workers (docs/flow-control.md, Priorities)."""
FAST_SLOW_FLOW = "rel_fast_slow"
"""A no-op first step whose output a slow map step fans out over: the tasks a fast step makes ready
for a slow one must wait in the queue for any worker, not in the worker that ran the fast step."""
SLOW_SECONDS = 0.4
"""How long each slow task of ``FAST_SLOW_FLOW`` sleeps after recording its execution."""
POISON_KINDS = ("ok", "sleep", "nul", "retry_nul", "deep", "exit", "interrupt", "cancel", "genexit")
FLOW_SLUGS = (
    LEDGER_FLOW,
    *OUTPUT_FLOWS,
    PLAIN_FLOW,
    LATE_FLOW,
    FAIL_FLOW,
    DOOMED_FLOW,
    STEP_FLOW,
    *ROUTED_FLOWS,
    *POISON_FLOWS,
    PRIORITY_FLOW,
    FAST_SLOW_FLOW,
)
"""The flows of ``tests/ledger_flows.py`` (kept here: importing that module would define the flows in the
test process too)."""
SETTINGS_MODULE = "tests.ledger_settings"


class Cursor(Protocol):
    def execute(self, query: Any, params: Any = ...) -> Any: ...
    def fetchall(self) -> Any: ...


def install_ledger(cursor: Cursor) -> None:
    """Create the ledger tables when missing (idempotent; the test database keeps them)."""
    cursor.execute(LEDGER_DDL)


def reset_flows(cursor: Cursor, flow_slugs: Iterable[str] = FLOW_SLUGS) -> None:
    """Drop these flows with their runs, queues, worker rows and ledger rows (worker tests commit)."""
    slugs = list(flow_slugs)
    cursor.execute(
        "select pgflow.delete_flow_and_data(flow_slug) from pgflow.flows where flow_slug = any(%s)", [slugs]
    )
    cursor.execute(
        "delete from pgflow.workers where queue_name = any(%s) or queue_name = %s "
        "or split_part(queue_name, '__', 1) = any(%s)",
        [slugs, SHARED_QUEUE, slugs],
    )
    from tests.workers import drop_shared_queues

    drop_shared_queues(cursor, [SHARED_QUEUE])
    cursor.execute("delete from public.ledger_execution where flow_slug = any(%s)", [slugs])
    cursor.execute("delete from public.ledger_effect where flow_slug = any(%s)", [slugs])


def prune_finished_runs(cursor: Cursor, flow_slugs: Iterable[str] = FLOW_SLUGS) -> None:
    """Delete finished runs (the engine's own prune) and their ledger rows, but keep the flows, so that
    workers shared by a module's tests go on serving them."""
    slugs = list(flow_slugs)
    cursor.execute("select pgflow.prune_data_older_than('0')")
    for table in ("ledger_execution", "ledger_effect"):
        cursor.execute(
            f"delete from public.{table} as l where flow_slug = any(%s)"
            " and not exists (select 1 from pgflow.runs as r where r.run_id = l.run_id)",
            [slugs],
        )


# ------------------------------------------------------------------ writers (worker side)

_local = threading.local()


LEDGER_APPLICATION_NAME = "pgflow_test_ledger"
"""``application_name`` of the execution ledger's own connections, so fault scenarios that terminate a
worker's backends can leave the ledger's alone."""


def _own_connection() -> Any:
    """An autocommit psycopg connection per handler thread, to the database Django uses."""
    conn = getattr(_local, "conn", None)
    if conn is None or conn.closed or conn.broken:
        import psycopg
        from django.db import connection

        from tests.workers import url_from_settings

        conn = psycopg.connect(
            url_from_settings(connection.settings_dict),
            autocommit=True,
            application_name=LEDGER_APPLICATION_NAME,
            connect_timeout=5,
            prepare_threshold=None,  # it may reach the database through a transaction pooler
        )
        _local.conn = conn
    return conn


def record_execution(ctx: Any) -> None:
    """One row per handler call, committed at once outside the completion transaction. A lost ledger
    connection (a PostgreSQL restart, a terminated backend) is reopened and the row written again for
    up to ~20 s: the ledger must count executions, not add failed attempts of its own. The call's own
    id makes the rewrite idempotent: a connection lost after the server committed the row but before
    its reply arrived (a pooler restarted at that moment) must not count the call twice."""
    import uuid

    import psycopg

    call_id = uuid.uuid4()
    delay = 0.1
    deadline = time.monotonic() + 20
    while True:
        try:
            _own_connection().execute(
                "insert into public.ledger_execution "
                "(call_id, flow_slug, run_id, step_slug, task_index, attempt, worker_pid) "
                "values (%s, %s, %s, %s, %s, %s, %s) on conflict (call_id) do nothing",
                [call_id, ctx.flow_slug, ctx.run_id, ctx.step_slug, ctx.task_index, ctx.attempt, os.getpid()],
            )
            return
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            conn = getattr(_local, "conn", None)
            if conn is not None:
                conn.close()
            time.sleep(delay)
            delay = min(delay * 2, 2.0)


def record_effect(ctx: Any, *, if_absent: bool = False) -> None:
    """The task's effect, on the handler's Django connection: inside an ``atomic=True`` handler it
    commits with the completion; a second effect of the same task violates the primary key.
    ``if_absent`` skips the insert when another attempt's effect already committed, so a late attempt
    reaches its (stale) completion instead of failing on the key."""
    from django.db import connections

    with connections[ctx.using].cursor() as cursor:
        cursor.execute(
            "insert into public.ledger_effect "
            "(flow_slug, run_id, step_slug, task_index, attempt, worker_pid) values (%s, %s, %s, %s, %s, %s)"
            + (" on conflict do nothing" if if_absent else ""),
            [ctx.flow_slug, ctx.run_id, ctx.step_slug, ctx.task_index, ctx.attempt, os.getpid()],
        )


# ------------------------------------------------------------------ invariants


def _rows(cursor: Cursor, query: str, params: Any = None) -> list[tuple[Any, ...]]:
    return tuples(query, params, on=cursor)


def _live_messages(cursor: Cursor) -> dict[str, set[int]]:
    """Live message ids of every existing queue pgflow owns (a flow's default queue or a step's queue)."""
    queues = _rows(
        cursor,
        "select q.queue_name, pgmq.format_table_name(q.queue_name, 'q') from ("
        "  select lower(flow_slug) as queue_name from pgflow.flows"
        "  union select queue_name from pgflow.steps"
        "  union select queue_name from pgflow.step_tasks where status in ('queued', 'started')"
        ") as q where to_regclass(format('pgmq.%I', pgmq.format_table_name(q.queue_name, 'q'))) is not null"
        " order by 1",
    )
    live: dict[str, set[int]] = {}
    for queue_name, table in queues:
        ids = _rows(cursor, f'select msg_id from pgmq."{table}"')
        live[queue_name] = {int(row[0]) for row in ids}
    return live


def find_violations(
    cursor: Cursor,
    *,
    require_terminal: bool = True,
    preserved: dict[str, set[int]] | None = None,
) -> list[str]:
    """Every broken invariant, one line each (empty when the database is consistent).

    ``preserved`` names live messages the classification rules deliberately leave without a task
    (a fatal message kept for inspection): ``{queue_name: {msg_id, ...}}``."""
    problems: list[str] = []
    live = _live_messages(cursor)
    allowed = preserved or {}

    active = _rows(
        cursor,
        "select run_id, step_slug, task_index, status, queue_name, message_id from pgflow.step_tasks "
        "where status in ('queued', 'started') order by run_id, step_slug, task_index",
    )
    owned: dict[str, set[int]] = {}
    for run_id, step_slug, index, status, queue_name, message_id in active:
        if message_id is None or int(message_id) not in live.get(queue_name, set()):
            problems.append(
                f"{status} task {run_id}/{step_slug}/{index} has no live message "
                f"(queue {queue_name}, message {message_id})"
            )
        if message_id is not None:
            owned.setdefault(queue_name, set()).add(int(message_id))
    for queue_name, ids in sorted(live.items()):
        orphans = ids - owned.get(queue_name, set()) - allowed.get(queue_name, set())
        if orphans:
            problems.append(
                f"queue {queue_name} holds live messages {sorted(orphans)} of no queued or started task"
            )

    for queue_name, message_id, count in _rows(
        cursor,
        "select queue_name, message_id, count(*) from pgflow.step_tasks where message_id is not null "
        "group by 1, 2 having count(*) > 1",
    ):
        problems.append(f"message ({queue_name}, {message_id}) belongs to {count} tasks")

    for run_id, step_slug, index, attempts, limit in _rows(
        cursor,
        "select t.run_id, t.step_slug, t.task_index, t.attempts_count, "
        "coalesce(s.opt_max_attempts, f.opt_max_attempts) "
        "from pgflow.step_tasks as t "
        "join pgflow.steps as s on s.flow_slug = t.flow_slug and s.step_slug = t.step_slug "
        "join pgflow.flows as f on f.flow_slug = t.flow_slug "
        "where t.attempts_count - t.attempts_base > coalesce(s.opt_max_attempts, f.opt_max_attempts) "
        "   or (t.status = 'completed' and t.attempts_count < 1)",
    ):
        problems.append(f"task {run_id}/{step_slug}/{index} has {attempts} attempts (max_attempts {limit})")

    for what, run_id, detail in _rows(
        cursor,
        "select 'run', run_id, format('remaining_steps %s', remaining_steps) from pgflow.runs "
        " where remaining_steps < 0 or (status = 'completed' and remaining_steps <> 0) "
        "union all "
        "select 'step ' || step_slug, run_id, "
        "       format('remaining_tasks %s, remaining_deps %s', remaining_tasks, remaining_deps) "
        "  from pgflow.step_states "
        " where remaining_tasks < 0 or remaining_deps < 0 "
        "    or (status = 'completed' and remaining_tasks <> 0)",
    ):
        problems.append(f"{what} of run {run_id}: negative or inconsistent counter ({detail})")

    for run_id, step_slug, remaining, active_count in _rows(
        cursor,
        "select ss.run_id, ss.step_slug, ss.remaining_tasks, "
        "       (select count(*) from pgflow.step_tasks as t where t.run_id = ss.run_id "
        "           and t.step_slug = ss.step_slug and t.status in ('queued', 'started')) "
        "  from pgflow.step_states as ss join pgflow.runs as r on r.run_id = ss.run_id "
        " where r.status = 'started' and ss.status = 'started'",
    ):
        if remaining != active_count:
            problems.append(
                f"step {step_slug} of run {run_id}: remaining_tasks {remaining} but {active_count} "
                "queued or started tasks"
            )

    for run_id, status, step_slug, task_index, task_status in _rows(
        cursor,
        "select r.run_id, r.status, t.step_slug, t.task_index, t.status from pgflow.runs as r "
        "join pgflow.step_tasks as t on t.run_id = r.run_id "
        "where r.status <> 'started' and t.status in ('queued', 'started')",
    ):
        problems.append(f"{status} run {run_id} still has a {task_status} task {step_slug}/{task_index}")

    if require_terminal:
        for run_id, flow_slug in _rows(
            cursor, "select run_id, flow_slug from pgflow.runs where status = 'started' order by 1"
        ):
            problems.append(f"run {run_id} of {flow_slug} is not terminal")
    return problems


def assert_invariants(
    cursor: Cursor,
    *,
    require_terminal: bool = True,
    preserved: dict[str, set[int]] | None = None,
) -> None:
    """Fail listing every broken invariant (see ``find_violations``)."""
    problems = find_violations(cursor, require_terminal=require_terminal, preserved=preserved)
    assert not problems, "invariants broken:\n" + "\n".join(problems[:50])


def exactly_once_violations(cursor: Cursor, flow_slug: str) -> list[str]:
    """The ledgers against the tasks of one flow whose handlers write both ledgers (atomic=True):

    - every completed task has exactly one effect, written by the attempt that completed it;
    - no effect exists for a task that is not completed (rolled back with a stale or failed attempt);
    - no attempt of a task ran twice, and no task ran more often than it was claimed."""
    problems: list[str] = []
    for run_id, step_slug, index, status, attempts, effects, effect_attempt in _rows(
        cursor,
        "select t.run_id, t.step_slug, t.task_index, t.status, t.attempts_count, "
        "       count(e.run_id), min(e.attempt) "
        "  from pgflow.step_tasks as t "
        "  left join public.ledger_effect as e "
        "    on e.run_id = t.run_id and e.step_slug = t.step_slug and e.task_index = t.task_index "
        " where t.flow_slug = %s "
        " group by t.run_id, t.step_slug, t.task_index, t.status, t.attempts_count "
        "having (t.status = 'completed') <> (count(e.run_id) = 1) "
        "    or (t.status = 'completed' and min(e.attempt) <> t.attempts_count)",
        [flow_slug],
    ):
        problems.append(
            f"{status} task {run_id}/{step_slug}/{index} (attempts {attempts}) has {effects} effect(s)"
            + ("" if effect_attempt is None else f" from attempt {effect_attempt}")
        )
    for run_id, step_slug, index, attempt, calls in _rows(
        cursor,
        "select run_id, step_slug, task_index, attempt, count(*) from public.ledger_execution "
        "where flow_slug = %s group by 1, 2, 3, 4 having count(*) > 1",
        [flow_slug],
    ):
        problems.append(f"attempt {attempt} of task {run_id}/{step_slug}/{index} ran {calls} times")
    for run_id, step_slug, index, calls, attempts in _rows(
        cursor,
        "select e.run_id, e.step_slug, e.task_index, count(*), max(t.attempts_count) "
        "  from public.ledger_execution as e "
        "  join pgflow.step_tasks as t "
        "    on t.run_id = e.run_id and t.step_slug = e.step_slug and t.task_index = e.task_index "
        " where e.flow_slug = %s group by 1, 2, 3 having count(*) > max(t.attempts_count)",
        [flow_slug],
    ):
        problems.append(f"task {run_id}/{step_slug}/{index} ran {calls} times in {attempts} claims")
    return problems


def assert_exactly_once(cursor: Cursor, flow_slug: str) -> None:
    problems = exactly_once_violations(cursor, flow_slug)
    assert not problems, f"ledger of {flow_slug} broken:\n" + "\n".join(problems[:50])


def failure_violations(cursor: Cursor, flow_slug: str) -> list[str]:
    """Every failure of one flow is on record (issue 15): a failed task holds its error and one
    ``attempt_errors`` entry per attempt, and no task of the flow ended permanently stalled (the
    fate of a task whose failure could not be written, or whose claim batch could not be decoded)."""
    problems: list[str] = []
    for run_id, step_slug, index, attempts, entries, error, stalled in _rows(
        cursor,
        "select run_id, step_slug, task_index, attempts_count, jsonb_array_length(attempt_errors), "
        "       error_message, permanently_stalled_at is not null "
        "  from pgflow.step_tasks "
        " where flow_slug = %s and status = 'failed' "
        "   and (error_message is null or jsonb_array_length(attempt_errors) <> attempts_count "
        "        or permanently_stalled_at is not null)",
        [flow_slug],
    ):
        problems.append(
            f"failed task {run_id}/{step_slug}/{index}: {attempts} attempts, {entries} recorded errors, "
            f"error {error!r}" + (", permanently stalled" if stalled else "")
        )
    return problems


def assert_failures_recorded(cursor: Cursor, flow_slug: str) -> None:
    problems = failure_violations(cursor, flow_slug)
    assert not problems, f"failures of {flow_slug} not on record:\n" + "\n".join(problems[:50])
