"""Flows whose runs the in-process runner and a worker subprocess must end identically.

Deterministic on purpose (a handler's behaviour depends only on its input and ``ctx.attempt``), with
no back-off (``base_delay=0``) so the worker's side stays quick; ``tests/testing_settings.py``
registers them for worker subprocesses.
"""

from __future__ import annotations

from typing import Any

from pgflow_django import Flow, Retry, route_flow, with_step_queues
from pgflow_django.flows.context import TaskContext

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


def _squares(slug: str) -> Flow:
    """numbers -> square (one task per number; 2 fails its first attempt) -> total. Built in a
    function so that only the queued versions below are module attributes (one flow per slug)."""
    flow = Flow(slug, max_attempts=2, base_delay=0, timeout=10)

    @flow.step()
    def numbers(flow_input: Any) -> Any:
        return list(range(1, flow_input["count"] + 1))

    @flow.map(array=numbers)
    def square(item: Any, ctx: TaskContext) -> Any:
        if item == 2 and ctx.attempt == 1:
            raise RuntimeError("square 2, attempt 1")
        return item * item

    @flow.step(depends_on=[square])
    def total(deps: Any) -> Any:
        return sum(deps["square"])

    return flow


stepped = with_step_queues(_squares("testing_stepped"))
"""Every step on its own queue: one worker per step (``--flow testing_stepped --step S``)."""

SHARED_QUEUES = ("testing_parity_a", "testing_parity_b")

routed = route_flow(
    _squares("testing_routed"),
    queues={"numbers": SHARED_QUEUES[0], "square": SHARED_QUEUES[1], "total": SHARED_QUEUES[0]},
)
"""Steps on two shared queues: one worker per queue (``--queue Q --flow testing_routed``)."""
