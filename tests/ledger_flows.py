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

from pgflow_django import Flow
from pgflow_django.worker import TaskContext
from tests.ledger import LEDGER_FLOW, OUTPUT_FLOWS, record_effect, record_execution

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
