"""One sequence of every pgflow.queue_access operation, run on any connection: the SQL tests compare a
queue with a static branch against one without, on each supported PGMQ version."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Query = Callable[[str, Any], list[dict[str, Any]]]
"""Runs a statement with parameters and returns its rows as dicts."""

BRANCH_SOURCES = (
    "select string_agg(p.prosrc, '' order by p.proname) as value from pg_proc as p"
    " where p.pronamespace = 'pgflow'::regnamespace and p.proname ~ '^queue_access(_[0-9]{3})?$'"
)
"""The text of every function that holds branches: pgflow.queue_access itself, and beyond 32 queues the
numbered functions it dispatches to. A queue has a branch when ``if v_queue = '<queue>' then`` is in it."""

RECORD = (
    "m.msg_id, m.read_ct, m.message, m.headers, extract(epoch from m.vt - clock_timestamp())::int as vt_in"
)


def access(
    run: Query,
    op: str,
    queue: str,
    ids: Any = None,
    numbers: Any = None,
    messages: Any = None,
    headers: Any = None,
) -> list[dict[str, Any]]:
    return run(
        f"select {RECORD} from pgflow.queue_access("
        "%s, %s, %s::bigint[], %s::integer[], %s::jsonb[], %s::jsonb[]) as m",
        [op, queue, ids, numbers, messages, headers],
    )


def session(run: Query, queue: str) -> dict[str, Any]:
    """Every operation on ``queue`` in one sequence, with message ids made relative to the first one."""
    sent = access(
        run, "send", queue, None, [0], ['{"i": 1}', '{"i": 2}', '{"i": 3}'], ['{"priority": 5}', None, None]
    )
    first = sent[0]["msg_id"]
    ids = [row["msg_id"] for row in sent]
    later = access(run, "send", queue, None, [30], ['{"i": 4}'], None)
    head = access(run, "head", queue)
    hidden = access(run, "set", queue, ids[:2], [60, 0])
    extended = access(run, "extend", queue, ids[:2], [30, 30])
    archived = access(run, "archive", queue, [ids[1], ids[2], ids[2] + 1000])

    def table(kind: str) -> list[tuple[Any, ...]]:
        name = run("select pgmq.format_table_name(%s, %s) as name", [queue, kind])[0]["name"]
        rows = run(f"select {RECORD} from pgmq.{name} as m", None)
        return sorted((row["msg_id"] - first, row["message"], row["headers"]) for row in rows)

    return {
        "sent": [row["msg_id"] - first for row in sent],
        "later": [row["msg_id"] - first for row in later],
        "head": [{**row, "msg_id": row["msg_id"] - first, "vt_in": None} for row in head],
        "hidden": sorted((row["msg_id"] - first, row["vt_in"]) for row in hidden),
        "extended": sorted(row["msg_id"] - first for row in extended),
        "archived": sorted(row["msg_id"] - first for row in archived),
        "left": table("q"),
        "archive": table("a"),
    }


def check_static_matches_dynamic(run: Query, static_queue: str, dynamic_queue: str) -> None:
    """The same sequence on a queue with a branch and on one without gives the same results."""
    static, dynamic = session(run, static_queue), session(run, dynamic_queue)
    assert static == dynamic
    assert static["sent"] == [0, 1, 2], "ids come back in message order"
    assert static["head"][0]["msg_id"] == 0 and static["head"][0]["headers"] == {"priority": 5}
    assert static["hidden"] == [(0, 60), (1, 0)]
    assert static["extended"] == [1], "extend writes only the message hidden for less than the offset"
    assert static["archived"] == [1, 2], "an id no longer in the queue is skipped"
