"""The bench flows: no-op handlers, so every figure is the engine's own cost."""

from __future__ import annotations

from typing import Any

from pgflow_django import Flow, with_step_queues

MAP_SIZE = 100
"""Elements of the map flow's input array: one run of ``bench_map`` is this many tasks."""

one = Flow("bench_one")
chain = Flow("bench_chain")
fanout = Flow("bench_map")


@one.step(slug="noop")
def one_noop(flow_input: Any) -> None:
    """Do nothing."""


@chain.step(slug="first")
def chain_first(flow_input: Any) -> None:
    """Do nothing."""


@chain.step(slug="second", depends_on=chain_first)
def chain_second(deps: Any) -> None:
    """Do nothing."""


@chain.step(slug="third", depends_on=chain_second)
def chain_third(deps: Any) -> None:
    """Do nothing."""


@fanout.map(slug="each")
def map_each(item: Any) -> Any:
    """Return the element unchanged."""
    return item


starve = Flow("bench_starve")
"""A map step beside a latency-sensitive sibling: the starvation scenario's flow (plain)."""


@starve.map(slug="bulk")
def starve_bulk(item: Any) -> Any:
    """Return the element unchanged."""
    return item


@starve.step(slug="ack")
def starve_ack(flow_input: Any) -> None:
    """Do nothing; its wait is what the scenario measures."""


starve_steps = with_step_queues(starve.copy(slug="bench_starve_steps"))
"""The same flow with a private queue per step, so ``ack`` has its own worker."""
