"""Flows of the reliability suite, registered in worker subprocesses by ``tests/ledger_settings.py``.

``rel_ledger`` writes both ledgers of ``tests/ledger.py`` from an ``atomic=True`` map handler, so a test
can prove every effect happened exactly once. ``rel_outputs`` / ``rel_outputs_atomic`` return whatever
the run input names, including outputs that cannot be stored, to prove the worker fails such a task
with a clear error and keeps going.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

from pgflow_django import Flow, RoutedFlow, StepQueuedFlow, route_flow, with_step_queues
from pgflow_django.worker import TaskContext
from tests.ledger import (
    DOOMED_FLOW,
    FAIL_FLOW,
    LATE_FLOW,
    LEDGER_FLOW,
    OUTPUT_FLOWS,
    PLAIN_FLOW,
    ROUTED_FLOWS,
    SHARED_QUEUE,
    STEP_FLOW,
    record_effect,
    record_execution,
)

ledger = Flow(LEDGER_FLOW, timeout=10, max_attempts=3)


@ledger.map(atomic=True)
def effect(item: Any, ctx: TaskContext) -> Any:
    """Both ledgers, then an optional ``{"sleep": s}`` on the first attempt (a window for faults)."""
    record_execution(ctx)
    record_effect(ctx)
    if isinstance(item, dict) and item.get("sleep") and ctx.attempt == 1:
        time.sleep(float(item["sleep"]))
    return {"attempt": ctx.attempt}


OUTPUTS: dict[str, Callable[[], Any]] = {
    "ok": lambda: {"fine": True},
    "object": object,
    "set": lambda: {1, 2},
    "bytes": lambda: b"raw",
    "nan": lambda: math.nan,
    "inf": lambda: {"x": math.inf},
    "nul": lambda: {"text": "a\x00b"},
    "surrogate": lambda: "\ud800",
    "deep": lambda: _nested(5000),
}
"""Outputs by name: ``ok`` is storable; every other one is refused by JSON or by PostgreSQL's jsonb."""


def _nested(depth: int) -> Any:
    value: Any = []
    for _ in range(depth):
        value = [value]
    return value


outputs = Flow(OUTPUT_FLOWS[0], timeout=10, max_attempts=1)


@outputs.step()
def emit(flow_input: Any) -> Any:
    return OUTPUTS[flow_input["kind"]]()


outputs_atomic = Flow(OUTPUT_FLOWS[1], timeout=10, max_attempts=1)


@outputs_atomic.step(atomic=True)
def emit_atomic(flow_input: Any, ctx: TaskContext) -> Any:
    """Its ledger effect must roll back whenever the output cannot be recorded."""
    record_effect(ctx)
    return OUTPUTS[flow_input["kind"]]()


# ---------------------------------------------------------------- fault scenarios (issue 8, item 2)


def _sleep_or_fail(item: Any, ctx: TaskContext) -> None:
    """``{"fail": true}`` raises; ``{"sleep": s}`` sleeps on the first attempt (a window for faults)."""
    if isinstance(item, dict):
        if item.get("fail"):
            raise RuntimeError("told to fail")
        if item.get("sleep") and ctx.attempt == 1:
            time.sleep(float(item["sleep"]))


def _ledger_map(item: Any, ctx: TaskContext) -> Any:
    """Both ledgers, then the item's fault window (the effect is written before it)."""
    record_execution(ctx)
    record_effect(ctx)
    _sleep_or_fail(item, ctx)
    return {"attempt": ctx.attempt}


plain = Flow(PLAIN_FLOW, timeout=10, max_attempts=3)


@plain.map()
def executed(item: Any, ctx: TaskContext) -> Any:
    """A plain (not atomic) handler: its completion goes through the completer; execution ledger only."""
    record_execution(ctx)
    _sleep_or_fail(item, ctx)
    return {"attempt": ctx.attempt}


late = Flow(LATE_FLOW, timeout=10, max_attempts=3)


@late.map(atomic=True)
def late_effect(item: Any, ctx: TaskContext) -> Any:
    """Execution ledger, the fault window, then the effect: a late attempt whose task another attempt
    already completed reaches its completion (stale, so rolled back) instead of failing on the key."""
    record_execution(ctx)
    _sleep_or_fail(item, ctx)
    record_effect(ctx, if_absent=True)
    return {"attempt": ctx.attempt}


fail = Flow(FAIL_FLOW, timeout=10, max_attempts=1)
fail.map(atomic=True, slug="effect")(_ledger_map)

doomed = Flow(DOOMED_FLOW, timeout=10, max_attempts=3)
doomed.map(atomic=True, slug="effect")(_ledger_map)


def _two_steps(slug: str) -> Flow:
    """``work`` (a root map writing both ledgers) -> ``total`` (writing both ledgers): built in a
    function so only the routed or step-queued deployment is a module attribute."""
    flow = Flow(slug, timeout=10, max_attempts=3)
    flow.map(atomic=True, slug="work")(_ledger_map)

    @flow.step(depends_on=["work"], atomic=True)
    def total(deps: Any, ctx: TaskContext) -> Any:
        record_execution(ctx)
        record_effect(ctx)
        return {"count": len(deps["work"])}

    return flow


steps: StepQueuedFlow = with_step_queues(_two_steps(STEP_FLOW))
routed: RoutedFlow = route_flow(
    _two_steps(ROUTED_FLOWS[0]), queues={"work": SHARED_QUEUE, "total": SHARED_QUEUE}
)
routed_b: RoutedFlow = route_flow(
    _two_steps(ROUTED_FLOWS[1]), queues={"work": SHARED_QUEUE, "total": SHARED_QUEUE}
)
