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


five = Flow("bench_five")
"""Five no-op steps in a chain: the larger run of the storage figures."""


@five.step(slug="s1")
def five_s1(flow_input: Any) -> None:
    """Do nothing."""


@five.step(slug="s2", depends_on=five_s1)
def five_s2(deps: Any) -> None:
    """Do nothing."""


@five.step(slug="s3", depends_on=five_s2)
def five_s3(deps: Any) -> None:
    """Do nothing."""


@five.step(slug="s4", depends_on=five_s3)
def five_s4(deps: Any) -> None:
    """Do nothing."""


@five.step(slug="s5", depends_on=five_s4)
def five_s5(deps: Any) -> None:
    """Do nothing."""


touch = Flow("bench_touch")
"""Three steps whose handlers each run one query on Django's connection, as real handlers do, so
every handler thread opens its connection: the flow the connection counts are taken on."""


def _one_query() -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("select 1")


@touch.step(slug="first")
def touch_first(flow_input: Any) -> None:
    """One query on Django's connection."""
    _one_query()


@touch.step(slug="second", depends_on=touch_first)
def touch_second(deps: Any) -> None:
    """One query on Django's connection."""
    _one_query()


@touch.step(slug="third", depends_on=touch_second)
def touch_third(deps: Any) -> None:
    """One query on Django's connection."""
    _one_query()


touch_steps = with_step_queues(touch.copy(slug="bench_touch_steps"))
"""The same flow with a private queue per step: one worker per step."""
