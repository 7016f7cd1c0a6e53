"""Helpers of the private per-step queue tests (issue 5): compile step-queued flows through the startup
compiler, claim with the exact step selector, and inspect each private queue's PGMQ objects."""

from __future__ import annotations

import uuid
from typing import Any

from tests.sql.support import compile_flow, jb, new_worker, q, q1, shape, shape_step, val


def step_shape(*steps: dict[str, Any], route: dict[str, str] | None = None, **options: Any) -> dict[str, Any]:
    """A compiler definition in queue mode ``step``; ``route`` adds the route a client generated."""
    definition = {**shape(*steps, **options), "queue_mode": "step"}
    if route is not None:
        definition["route"] = route
    return definition


def compile_steps(flow_slug: str, *steps: dict[str, Any], **options: Any) -> dict[str, Any]:
    """Compile a step-queued flow; asserts it was created now."""
    answer = compile_flow(flow_slug, step_shape(*steps, **options))
    assert answer["status"] == "compiled", answer
    return answer


def chain(flow_slug: str = "f") -> dict[str, str]:
    """Compile ``f``: roots ``a`` and ``b``, then ``c`` after both; returns its route."""
    compile_steps(flow_slug, shape_step("a"), shape_step("b"), shape_step("c", "a", "b"))
    return route(flow_slug)


def route(flow_slug: str) -> dict[str, str]:
    """The persisted route: step -> queue, in step index order."""
    return {
        r["step_slug"]: r["queue_name"]
        for r in q(
            "select step_slug, queue_name from pgflow.steps where flow_slug = %s order by step_index",
            [flow_slug],
        )
    }


def meta(prefix: str) -> list[str]:
    """pgmq.meta spellings starting with ``prefix`` (any case), sorted."""
    return [
        r["queue_name"]
        for r in q(
            "select queue_name from pgmq.meta where lower(queue_name) like lower(%s) || '%%' order by 1",
            [prefix],
        )
    ]


def tables(queue_name: str) -> dict[str, bool]:
    """Whether the queue table and archive table of ``queue_name`` exist."""
    row = q1(
        "select to_regclass(format('pgmq.%%I', pgmq.format_table_name(%s, 'q'))) is not null as q, "
        "to_regclass(format('pgmq.%%I', pgmq.format_table_name(%s, 'a'))) is not null as a",
        [queue_name, queue_name],
    )
    return {"q": bool(row["q"]), "a": bool(row["a"])}


def flow_row(flow_slug: str) -> dict[str, Any] | None:
    found = q("select * from pgflow.flows where flow_slug = %s", [flow_slug])
    return found[0] if found else None


def claim_step(
    queue_name: str,
    flow_slug: str,
    step_slug: str | None,
    msg_ids: list[int],
    worker_id: uuid.UUID | None = None,
) -> list[dict[str, Any]]:
    """``pgflow.start_tasks(queue, flow, ids, worker, step_slug)``: claim records by message id."""
    worker = worker_id or new_worker(queue_name)
    return sorted(
        q(
            "select * from pgflow.start_tasks(%s, %s, %s::bigint[], %s::uuid, %s)",
            [queue_name, flow_slug, list(msg_ids), worker, step_slug],
        ),
        key=lambda r: r["message_id"],
    )


def pgflow_body(flow_slug: str, step_slug: str, run_id: uuid.UUID, task_index: int = 0) -> str:
    """A genuine-looking task message body (jsonb text)."""
    return jb(
        {"flow_slug": flow_slug, "run_id": str(run_id), "step_slug": step_slug, "task_index": task_index}
    )


def message_count(queue_name: str, prefix: str = "q") -> int:
    table = val("select pgmq.format_table_name(%s, %s) as t", [queue_name, prefix])
    return int(val(f'select count(*) as n from pgmq."{table}"'))
