"""Time control without sleeping: what would become visible later is moved earlier in the database.

A retry's back-off (``base_delay * 2**attempts`` or ``Retry(delay=...)``), a step's ``start_delay``
and a delayed run's ``not_before`` (``start_flow(delay=...)``, a Django task's ``run_after``) are all
a message ``vt`` in the future, and a run's ``not_before`` delays the steps it starts later. Moving
both back by N seconds is exactly what N seconds of waiting would do to the claim, which reads
``vt <= clock_timestamp()``; the attempts, errors and outputs recorded are the real ones.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from django.db import connections
from psycopg import sql

_HIDDEN_SQL = """
select t.queue_name, pgmq.format_table_name(t.queue_name, 'q'), array_agg(t.message_id order by t.message_id)
  from pgflow.step_tasks as t
  join pgflow.runs as r on r.run_id = t.run_id
 where r.status = 'started' and t.status = 'queued' and t.message_id is not null
   and (%(flows)s::text[] is null or t.flow_slug = any(%(flows)s::text[]))
 group by t.queue_name
 order by t.queue_name
"""
"""The messages of queued tasks in started runs, by queue: the only ones time control moves."""


@dataclass(frozen=True)
class Waiting:
    """A queued task whose message becomes visible later."""

    queue_name: str
    message_id: int
    seconds: float


def _cursor(using: str) -> Any:
    return connections[using].cursor()


def waiting(flow_slugs: Sequence[str] | None = None, *, using: str = "default") -> list[Waiting]:
    """Queued tasks (of ``flow_slugs``, or all flows) whose messages are hidden, soonest first."""
    found: list[Waiting] = []
    with _cursor(using) as cursor:
        cursor.execute(_HIDDEN_SQL, {"flows": None if flow_slugs is None else list(flow_slugs)})
        for queue_name, table, ids in cursor.fetchall():
            cursor.execute(
                sql.SQL(
                    "select msg_id, extract(epoch from vt - clock_timestamp())::float8 from pgmq.{}"
                    " where msg_id = any(%s) and vt > clock_timestamp()"
                ).format(sql.Identifier(table)),
                [ids],
            )
            found.extend(Waiting(queue_name, int(row[0]), float(row[1])) for row in cursor.fetchall())
    return sorted(found, key=lambda item: item.seconds)


def advance(seconds: float, *, flows: Sequence[Any] | None = None, using: str = "default") -> int:
    """Let ``seconds`` pass for delayed work (of ``flows``, default every flow): hidden messages of
    queued tasks and delayed runs' ``not_before`` move that much earlier. Returns how many messages
    became visible. Nothing sleeps; call ``drain()`` afterwards to run what is now due."""
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or seconds < 0:
        raise ValueError(f"advance: seconds must be a number >= 0, got {seconds!r}")
    slugs = None if flows is None else [flow if isinstance(flow, str) else flow.slug for flow in flows]
    return _shift(float(seconds), slugs, queue_tables(slugs, using=using), using)[1]


def queue_tables(flow_slugs: Sequence[str] | None, *, using: str = "default") -> list[tuple[str, str]]:
    """(queue, PGMQ table) of every queue the flows' steps use."""
    with _cursor(using) as cursor:
        cursor.execute(
            "select distinct queue_name, pgmq.format_table_name(queue_name, 'q') from pgflow.steps"
            " where %(flows)s::text[] is null or flow_slug = any(%(flows)s::text[]) order by 1",
            {"flows": None if flow_slugs is None else list(flow_slugs)},
        )
        return [(str(row[0]), str(row[1])) for row in cursor.fetchall()]


Execute = Callable[[sql.Composed, dict[str, Any]], list[tuple[Any, ...]]]
"""Runs one statement and returns its rows (a drain passes its engine's, so the next claim can travel
with it)."""


def skip_to_next(
    flow_slugs: Sequence[str] | None,
    queues: Sequence[tuple[str, str]],
    *,
    using: str = "default",
    execute: Execute | None = None,
) -> float | None:
    """Advance to the moment the soonest hidden message becomes visible, in one statement; the
    seconds skipped, or None when nothing is waiting."""
    return _shift(None, flow_slugs, queues, using, execute)[0]


def _django_rows(using: str) -> Execute:
    def execute(statement: sql.Composed, params: dict[str, Any]) -> list[tuple[Any, ...]]:
        with _cursor(using) as cursor:
            cursor.execute(statement, params)
            return list(cursor.fetchall())

    return execute


def _shift(
    seconds: float | None,
    flow_slugs: Sequence[str] | None,
    queues: Sequence[tuple[str, str]],
    using: str,
    execute: Execute | None = None,
) -> tuple[float | None, int]:
    """Move the hidden messages of queued tasks (on ``queues``) and delayed runs' ``not_before``
    back by ``seconds`` (None: until the soonest message is due). Returns (seconds, now visible)."""
    if not queues:
        return None, 0
    hidden = sql.SQL(" union all ").join(
        sql.SQL(
            "select {queue} as queue_name, m.msg_id, m.vt from pgmq.{table} as m"
            " where m.vt > clock_timestamp()"
        ).format(queue=sql.Literal(queue), table=sql.Identifier(table))
        for queue, table in queues
    )
    updates = sql.SQL(", ").join(
        sql.SQL(
            "{name} as (update pgmq.{table} as m set vt = m.vt - delta.d from due, delta"
            " where due.queue_name = {queue} and m.msg_id = due.msg_id"
            " returning m.vt <= clock_timestamp() as visible)"
        ).format(name=sql.Identifier(f"u{index}"), table=sql.Identifier(table), queue=sql.Literal(queue))
        for index, (queue, table) in enumerate(queues)
    )
    visible = sql.SQL(" + ").join(
        sql.SQL("(select count(*) from {} where visible)").format(sql.Identifier(f"u{index}"))
        for index in range(len(queues))
    )
    statement = sql.SQL(
        """
        with hidden as ({hidden}), due as (
          select h.queue_name, h.msg_id, h.vt from hidden as h
            join pgflow.step_tasks as t on t.queue_name = h.queue_name and t.message_id = h.msg_id
            join pgflow.runs as r on r.run_id = t.run_id
           where t.status = 'queued' and r.status = 'started'
             and (%(flows)s::text[] is null or t.flow_slug = any(%(flows)s::text[]))
        ), delta as (
          select coalesce(make_interval(secs => %(secs)s),
                          (select min(vt) from due) - clock_timestamp() + interval '1 millisecond') as d
        ), {updates}, runs as (
          update pgflow.runs as r set not_before = r.not_before - delta.d from delta
           where delta.d is not null and r.status = 'started' and r.not_before > clock_timestamp()
             and (%(flows)s::text[] is null or r.flow_slug = any(%(flows)s::text[]))
          returning 1
        )
        select extract(epoch from (select d from delta))::float8, {visible}, (select count(*) from runs)
        """
    ).format(hidden=hidden, updates=updates, visible=visible)
    run = execute or _django_rows(using)
    row = run(statement, {"flows": None if flow_slugs is None else list(flow_slugs), "secs": seconds})[0]
    moved = None if row[0] is None else max(float(row[0]), 0.0)
    return moved, int(row[1])
