"""Helpers of the flow-control tests: set a flow's limits and read its waits and holds."""

from __future__ import annotations

from typing import Any

from tests.sql.support import jb, q, val


def set_limits(flow_slug: str, *limits: dict[str, Any]) -> int:
    return int(val("select pgflow.set_flow_limits(%s, %s::jsonb) as n", [flow_slug, jb(list(limits))]))


def concurrency(amount: int, field: str | None = None, step_slug: str = "") -> dict[str, Any]:
    return {
        "step_slug": step_slug,
        "kind": "concurrency",
        "key_source": "none" if field is None else "input",
        "key_field": field,
        "amount": amount,
    }


def rate(
    amount: int, period: float, burst: int = 1, field: str | None = None, step_slug: str = ""
) -> dict[str, Any]:
    return {
        "step_slug": step_slug,
        "kind": "rate",
        "key_source": "none" if field is None else "input",
        "key_field": field,
        "amount": amount,
        "period": period,
        "burst": burst,
    }


def outcomes(flow_slug: str, qty: int = 100) -> dict[str, list[int]]:
    """Read every visible message and claim them: message ids by outcome."""
    msgs = q("select msg_id from pgmq.read(%s, 30, %s)", [flow_slug, qty])
    found: dict[str, list[int]] = {}
    if not msgs:
        return found
    for row in q(
        "select outcome, message_id"
        " from pgflow.start_tasks(lower(%s), %s, %s::bigint[], gen_random_uuid(), null)"
        " order by message_id",
        [flow_slug, flow_slug, [m["msg_id"] for m in msgs]],
    ):
        found.setdefault(row["outcome"], []).append(int(row["message_id"]))
    return found


def waits(flow_slug: str) -> list[dict[str, Any]]:
    return q(
        "select * from pgflow.limit_waits where flow_slug = %s order by deferred_at, message_id", [flow_slug]
    )


def holds(flow_slug: str) -> list[dict[str, Any]]:
    return q("select * from pgflow.limit_holds where flow_slug = %s order by key, run_id", [flow_slug])
