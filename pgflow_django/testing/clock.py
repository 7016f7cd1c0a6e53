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

from pgflow_django.db import queries as db_queries
from pgflow_django.db.query import Query, fetch_all, fetch_value
from pgflow_django.testing import queries


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
        flows = {"flows": None if flow_slugs is None else list(flow_slugs)}
        for queued in fetch_all(cursor, queries.QUEUED_MESSAGES, flows):
            hidden = fetch_all(cursor, queries.HIDDEN_MESSAGES, [queued.message_ids], table=queued.table)
            found.extend(Waiting(queued.queue_name, int(row.msg_id), float(row.seconds)) for row in hidden)
    return sorted(found, key=lambda item: item.seconds)


def advance(seconds: float, *, flows: Sequence[Any] | None = None, using: str = "default") -> int:
    """Let ``seconds`` pass for delayed work (of ``flows``, default every flow): hidden messages of
    queued tasks, delayed runs' ``not_before``, sleeps' times and event waits' timeouts move that much
    earlier, and the waits now due end (``pgflow.wake_waits``). Returns how many messages became
    visible. Nothing sleeps; call ``drain()`` afterwards to run what is now due."""
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or seconds < 0:
        raise ValueError(f"advance: seconds must be a number >= 0, got {seconds!r}")
    slugs = (
        None
        if flows is None
        else _every_version([flow if isinstance(flow, str) else flow.slug for flow in flows], using)
    )
    visible = _shift(float(seconds), slugs, queue_tables(slugs, using=using), using)[1]
    with _cursor(using) as cursor:
        fetch_all(cursor, queries.SHIFT_WAITS, {"secs": float(seconds), "flows": slugs})
        wake_due_waits(cursor)
    return visible


def _every_version(flow_slugs: list[str], using: str) -> list[str]:
    """The stored slugs of every version of the flows named (a version's stored slug: itself)."""
    with _cursor(using) as cursor:
        return list(fetch_value(cursor, queries.EVERY_VERSION, {"slugs": flow_slugs}))


def wake_due_waits(cursor: Any) -> int:
    """End the waits due now, as a worker's wait pass does; how many ended (completed or failed)."""
    return sum(db_queries.wake_waits(cursor).values())


def queue_tables(flow_slugs: Sequence[str] | None, *, using: str = "default") -> list[tuple[str, str]]:
    """(queue, PGMQ table) of every queue the flows' steps use."""
    with _cursor(using) as cursor:
        rows = fetch_all(
            cursor, db_queries.FLOW_QUEUE_TABLES, {"flows": None if flow_slugs is None else list(flow_slugs)}
        )
    return [(row.queue_name, row.table) for row in rows]


Fetch = Callable[[Query[queries.TimeShift], dict[str, Any]], list[queries.TimeShift]]
"""Runs the time shift and returns its rows (a drain passes its engine's ``fetch``, so the next claim
can travel with it)."""


def skip_to_next(
    flow_slugs: Sequence[str] | None,
    queues: Sequence[tuple[str, str]],
    *,
    using: str = "default",
    fetch: Fetch | None = None,
) -> float | None:
    """Advance to the moment the soonest hidden message becomes visible, in one statement; the
    seconds skipped, or None when nothing is waiting."""
    return _shift(None, flow_slugs, queues, using, fetch)[0]


def _on_django(using: str) -> Fetch:
    def fetch(query: Query[queries.TimeShift], params: dict[str, Any]) -> list[queries.TimeShift]:
        with _cursor(using) as cursor:
            return fetch_all(cursor, query, params)

    return fetch


def _shift(
    seconds: float | None,
    flow_slugs: Sequence[str] | None,
    queues: Sequence[tuple[str, str]],
    using: str,
    fetch: Fetch | None = None,
) -> tuple[float | None, int]:
    """Move the hidden messages of queued tasks (on ``queues``) and delayed runs' ``not_before``
    back by ``seconds`` (None: until the soonest message is due). Returns (seconds, now visible)."""
    if not queues:
        return None, 0
    params = {"flows": None if flow_slugs is None else list(flow_slugs), "secs": seconds}
    shifted = (fetch or _on_django(using))(queries.time_shift(queues), params)[0]
    moved = None if shifted.seconds is None else max(float(shifted.seconds), 0.0)
    return moved, int(shifted.visible)
