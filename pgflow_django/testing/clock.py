"""Time control without sleeping: what would become visible later is moved earlier in the database.

A retry's back-off (``base_delay * 2**attempts`` or ``Retry(delay=...)``), a step's ``start_delay``
and a delayed run's ``not_before`` (``start_flow(delay=...)``, a Django task's ``run_after``) are all
a message ``vt`` in the future, and a run's ``not_before`` delays the steps it starts later. Moving
both back by N seconds is exactly what N seconds of waiting would do to the claim, which reads
``vt <= clock_timestamp()``; the attempts, errors and outputs recorded are the real ones.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django.db import connections, transaction
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
    with transaction.atomic(using=using), _cursor(using) as cursor:
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
    return shift(float(seconds), slugs, using=using)


def shift(seconds: float, flow_slugs: Sequence[str] | None, *, using: str = "default") -> int:
    visible = 0
    slugs = None if flow_slugs is None else list(flow_slugs)
    with transaction.atomic(using=using), _cursor(using) as cursor:
        cursor.execute(_HIDDEN_SQL, {"flows": slugs})
        for _queue_name, table, ids in cursor.fetchall():
            cursor.execute(
                sql.SQL(
                    "update pgmq.{} set vt = vt - make_interval(secs => %s)"
                    " where msg_id = any(%s) and vt > clock_timestamp()"
                    " returning vt <= clock_timestamp()"
                ).format(sql.Identifier(table)),
                [seconds, ids],
            )
            visible += sum(1 for row in cursor.fetchall() if row[0])
        cursor.execute(
            "update pgflow.runs set not_before = not_before - make_interval(secs => %(secs)s)"
            " where status = 'started' and not_before > clock_timestamp()"
            " and (%(flows)s::text[] is null or flow_slug = any(%(flows)s::text[]))",
            {"secs": seconds, "flows": slugs},
        )
    return visible


def skip_to_next(flow_slugs: Sequence[str] | None, *, using: str = "default") -> float | None:
    """Advance to the moment the soonest hidden message becomes visible; the seconds skipped, or
    None when nothing is waiting."""
    pending = waiting(flow_slugs, using=using)
    if not pending:
        return None
    seconds = max(pending[0].seconds, 0.0) + 0.001
    shift(seconds, flow_slugs, using=using)
    return seconds
