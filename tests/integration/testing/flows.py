"""Flows whose runs the in-process runner and a worker subprocess must end identically.

Deterministic on purpose (a handler's behaviour depends only on its input and ``ctx.attempt``), with
no back-off (``base_delay=0``) so the worker's side stays quick; ``tests/testing_settings.py``
registers them for worker subprocesses.
"""

from __future__ import annotations

from typing import Any

from pgflow_django import Flow, Retry
from pgflow_django.worker.context import TaskContext

retried = Flow("testing_retried", max_attempts=3, base_delay=0, timeout=10)


@retried.step()
def shaky(flow_input: Any, ctx: TaskContext) -> Any:
    """Fails on attempts 1 and 2, succeeds on the third."""
    if ctx.attempt < 3:
        raise RuntimeError(f"shaky attempt {ctx.attempt}")
    return {"attempt": ctx.attempt, "n": flow_input["n"]}


@retried.step(depends_on=[shaky], start_delay=1)
def asks(deps: Any, ctx: TaskContext) -> Any:
    """Starts a second late, then chooses its own retry delay once (``Retry``)."""
    if ctx.attempt == 1:
        raise Retry(delay=0)
    return {"attempt": ctx.attempt, "n": deps["shaky"]["n"] * 2}


failing = Flow("testing_failing", max_attempts=2, base_delay=0, timeout=10)


@failing.step()
def explode(flow_input: Any) -> Any:
    raise ValueError(f"explode {flow_input['n']}")


@failing.step(depends_on=[explode])
def never(deps: Any) -> Any:
    return "unreachable"


skipping = Flow("testing_skipping", max_attempts=1, base_delay=0, timeout=10)


@skipping.map(when_exhausted="skip-cascade")
def element(item: Any) -> Any:
    """A map whose element 2 fails: the step and its dependents are skipped, the run completes."""
    if item == 2:
        raise KeyError(item)
    return item * 10


@skipping.step(depends_on=[element])
def after(deps: Any) -> Any:
    return "skipped with element"


@skipping.step()
def independent(flow_input: Any) -> Any:
    return len(flow_input)
