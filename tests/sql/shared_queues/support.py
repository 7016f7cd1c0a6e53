"""Helpers of the shared-queue tests (issue 6): compile routed flows through the startup compiler, claim
with ``pgflow.start_shared_tasks`` and an exact support set, and inspect shared queues' PGMQ objects.

Queue names here start with ``sq_`` so that they never meet the example project's shared queues
(``support_fast``, ``support_bulk``), which other tests leave declared in the same database."""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import Any

from tests.sql.support import compile_flow, new_worker, q, shape, shape_step, val

FAST, BULK = "sq_fast", "sq_bulk"
STEPS = (shape_step("classify"), shape_step("enrich", "classify"), shape_step("deliver", "enrich"))
ROUTE = {"classify": FAST, "enrich": FAST, "deliver": BULK}
"""The seed's example: two steps on one queue, the third on another."""


def routed_shape(*steps: dict[str, Any], route: dict[str, Any], **options: Any) -> dict[str, Any]:
    """A compiler definition in queue mode ``routed`` with its route {step: queue}."""
    return {**shape(*steps, **options), "queue_mode": "routed", "route": route}


def compile_routed(
    flow_slug: str,
    route: dict[str, Any] | None = None,
    *steps: dict[str, Any],
    allow_recompile: bool = False,
    **options: Any,
) -> dict[str, Any]:
    """Compile (or verify) a routed flow, by default the seed's three steps on ``ROUTE``."""
    definition = routed_shape(*(steps or STEPS), route=ROUTE if route is None else route, **options)
    return compile_flow(flow_slug, definition, allow_recompile)


def declared() -> set[str]:
    """Rows of ``pgflow.shared_queues``."""
    return {r["queue_name"] for r in q("select queue_name from pgflow.shared_queues")}


def listed() -> set[str]:
    """Queues ``pgmq.list_queues()`` reports."""
    return {r["queue_name"] for r in q("select queue_name::text from pgmq.list_queues()")}


def has_notify_trigger(queue_name: str) -> bool:
    return bool(
        val(
            "select exists (select 1 from pg_trigger where tgname = 'pgflow_notify_insert' "
            "and tgrelid = to_regclass(format('pgmq.%%I', pgmq.format_table_name(%s, 'q')))) as t",
            [queue_name],
        )
    )


def route_of(flow_slug: str) -> dict[str, str]:
    """The persisted route: step -> queue, in step index order."""
    return {
        r["step_slug"]: r["queue_name"]
        for r in q(
            "select step_slug, queue_name from pgflow.steps where flow_slug = %s order by step_index",
            [flow_slug],
        )
    }


def support_of(flow_slug: str, queue_name: str) -> list[tuple[str, str]]:
    """The (flow, step) pairs whose persisted route is ``queue_name``: a worker's exact support set."""
    return [
        (r["flow_slug"], r["step_slug"])
        for r in q(
            "select flow_slug, step_slug from pgflow.steps where flow_slug = %s and queue_name = %s "
            "order by step_index",
            [flow_slug, queue_name],
        )
    ]


def claim_shared(
    queue_name: str,
    msg_ids: Iterable[int],
    support: Iterable[tuple[str, str]],
    worker_id: uuid.UUID | None = None,
) -> list[dict[str, Any]]:
    """``pgflow.start_shared_tasks``: its claim records, ordered by message id."""
    pairs = list(support)
    worker = worker_id or new_worker(queue_name)
    return sorted(
        q(
            "select * from pgflow.start_shared_tasks(%s, %s::bigint[], %s::uuid, %s::text[], %s::text[])",
            [queue_name, list(msg_ids), worker, [f for f, _ in pairs], [s for _, s in pairs]],
        ),
        key=lambda r: r["message_id"],
    )


def outcomes(records: list[dict[str, Any]]) -> dict[int, str]:
    return {r["message_id"]: r["outcome"] for r in records}


def read(queue_name: str, vt: int = 5, qty: int = 100) -> list[int]:
    """``pgmq.read``: the ids of the visible messages, as a shared-queue worker reads them."""
    return sorted(
        int(r["msg_id"]) for r in q("select msg_id from pgmq.read(%s, %s, %s)", [queue_name, vt, qty])
    )


def message_ids(run_id: uuid.UUID, step_slug: str) -> list[int]:
    return [
        int(r["message_id"])
        for r in q(
            "select message_id from pgflow.step_tasks where run_id = %s and step_slug = %s "
            "order by task_index",
            [run_id, step_slug],
        )
    ]


def purge_committed(flows: Iterable[str], queues: Iterable[str]) -> None:
    """For tests that commit: delete the flows, then drop the shared queues and their declarations
    (nothing in pgflow drops a shared queue), and the workers registered on them."""
    names = list(queues)
    q(
        "select pgflow.delete_flow_and_data(flow_slug) from pgflow.flows where flow_slug = any(%s)",
        [list(flows)],
    )
    q("select pgmq.drop_queue(queue_name) from pgmq.list_queues() where queue_name = any(%s)", [names])
    q("delete from pgflow.shared_queues where queue_name = any(%s)", [names])
    q("delete from pgflow.workers where queue_name = any(%s)", [names])
