"""Flows of the reliability suite, registered in worker subprocesses by ``tests/ledger_settings.py``.

``rel_ledger`` writes both ledgers of ``tests/ledger.py`` from an ``atomic=True`` map handler, so a test
can prove every effect happened exactly once. ``rel_outputs`` / ``rel_outputs_atomic`` return whatever
the run input names, including outputs that cannot be stored, to prove the worker fails such a task
with a clear error and keeps going.
"""

from __future__ import annotations

import asyncio
import datetime
import decimal
import math
import os
import time
import uuid
from collections.abc import Callable
from typing import Any

from pgflow_django import Flow, Retry, RoutedFlow, StepQueuedFlow, route_flow, with_step_queues
from pgflow_django.worker import TaskContext
from tests.ledger import (
    DOOMED_FLOW,
    FAIL_FLOW,
    FAST_SLOW_FLOW,
    LATE_FLOW,
    LEDGER_FLOW,
    OUTPUT_FLOWS,
    PLAIN_FLOW,
    POISON_FLOWS,
    PRIORITY_FLOW,
    ROUTED_FLOWS,
    SHARED_QUEUE,
    SLOW_SECONDS,
    STEP_FLOW,
    record_effect,
    record_execution,
)

ledger = Flow(LEDGER_FLOW, timeout=10, max_attempts=3)
HOLD_LIMIT_SECONDS = 120
"""The longest a ``{"hold": path}`` task waits for its file to go (a test that failed left it)."""


@ledger.map(atomic=True)
def effect(item: Any, ctx: TaskContext) -> Any:
    """Both ledgers, then on the first attempt an optional ``{"sleep": s}``, or ``{"hold": path}``:
    wait while that file exists (up to ``HOLD_LIMIT_SECONDS``), a window for faults that the test
    closes when it is done rather than one that closes on a busy machine before the fault is in."""
    record_execution(ctx)
    record_effect(ctx)
    if isinstance(item, dict) and ctx.attempt == 1:
        if item.get("sleep"):
            time.sleep(float(item["sleep"]))
        if item.get("hold"):
            deadline = time.monotonic() + HOLD_LIMIT_SECONDS
            while os.path.exists(item["hold"]) and time.monotonic() < deadline:
                time.sleep(0.05)
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
    "django": lambda: {
        "at": datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.UTC),
        "amount": decimal.Decimal("1.50"),
        "id": uuid.UUID(int=1),
    },
}
"""Outputs by name: ``ok`` and ``django`` (Django's types, stored as strings) are storable; every other
one is refused by the engine's JSON rule."""


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


# ---------------------------------------------------------------- poison scenarios (issue 15)

POISON_ERROR = "bad \x00 byte and lone \ud800 surrogate"
"""What the ``nul`` and ``retry_nul`` kinds raise: PostgreSQL text holds neither character."""

RAISED: dict[str, Callable[[], BaseException]] = {
    "nul": lambda: RuntimeError(POISON_ERROR),
    "retry_nul": lambda: Retry(delay=0, message=POISON_ERROR),
    "exit": lambda: SystemExit(3),
    "interrupt": KeyboardInterrupt,
    "cancel": asyncio.CancelledError,
    "genexit": GeneratorExit,
}


def _depth(value: Any) -> int:
    depth = 0
    while isinstance(value, list):
        depth, value = depth + 1, value[0] if value else None
    return depth


def _poison_output(flow_input: Any, ctx: TaskContext) -> Any:
    """The root step's behaviour, named by ``flow_input["kind"]`` (``POISON_KINDS``); an input without
    a kind (a poisoned one, once decodable) is returned as it is."""
    kind = flow_input.get("kind") if isinstance(flow_input, dict) else None
    if kind in RAISED:
        raise RAISED[kind]()
    if kind == "sleep" and ctx.attempt == 1:
        time.sleep(float(flow_input.get("sleep", 120)))
    if kind == "deep":
        return _nested(int(flow_input["depth"]))
    return {"attempt": ctx.attempt}


def _poison_flow(slug: str, *, atomic: bool) -> Flow:
    flow = Flow(slug, timeout=10, max_attempts=3, base_delay=0)

    @flow.step(slug="effect", atomic=atomic)
    def effect(flow_input: Any, ctx: TaskContext) -> Any:
        record_execution(ctx)
        if atomic:
            record_effect(ctx)
        return _poison_output(flow_input, ctx)

    @flow.step(depends_on=["effect"], atomic=atomic)
    def after(deps: Any, ctx: TaskContext) -> Any:
        """Its input is built by SQL one level deeper than ``effect``'s output: report that depth."""
        record_execution(ctx)
        if atomic:
            record_effect(ctx)
        return {"depth": _depth(deps["effect"]) + 1}

    return flow


poison = _poison_flow(POISON_FLOWS[0], atomic=True)
poison_plain = _poison_flow(POISON_FLOWS[1], atomic=False)
poison_async = Flow(POISON_FLOWS[2], timeout=10, max_attempts=2, base_delay=0)


@poison_async.step()
async def raise_async(flow_input: Any, ctx: TaskContext) -> Any:
    await asyncio.sleep(0)
    return _poison_output(flow_input, ctx)


prioritised = Flow(PRIORITY_FLOW, timeout=10, max_attempts=1)


@prioritised.step()
def take(flow_input: Any, ctx: TaskContext) -> Any:
    """Record the execution, then hold the slot a little so the workers' claims interleave."""
    record_execution(ctx)
    time.sleep(0.02)
    return {"n": flow_input["n"]}


fast_slow = Flow(FAST_SLOW_FLOW, timeout=2, max_attempts=2, base_delay=0)


@fast_slow.step()
def split(flow_input: Any) -> Any:
    return list(range(flow_input["n"]))


@fast_slow.map(array=split)
def slow(item: Any, ctx: TaskContext) -> Any:
    """Record the execution, then take longer than a claim's round trip by far."""
    record_execution(ctx)
    time.sleep(SLOW_SECONDS)
    return item
