"""Example flows: the demo runs them and the worker tests drive them through real worker processes.

Handlers that record effects write ``LedgerEntry`` rows, so a test can count what really happened.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from pgflow_django import Flow, Retry
from pgflow_django.worker import TaskContext

chain = Flow("example_chain", timeout=10)


@chain.step()
def first(flow_input: Any) -> Any:
    return {"n": flow_input["n"] + 1}


@chain.step(depends_on=[first])
async def second(deps: Any, ctx: TaskContext) -> Any:
    await asyncio.sleep(0)
    flow_input = await ctx.aflow_input()
    return {"n": deps["first"]["n"] * 2, "flow_n": flow_input["n"]}


@chain.step(depends_on=[second])
def third(deps: Any, ctx: TaskContext) -> Any:
    return {"n": deps["second"]["n"] - 3, "flow_n": ctx.flow_input["n"]}


fanout = Flow("example_map", timeout=10)


@fanout.step()
def numbers(flow_input: Any) -> Any:
    return list(range(flow_input["count"]))


@fanout.map(array=numbers)
def square(item: Any) -> Any:
    return item * item


@fanout.step(depends_on=[square])
def total(deps: Any) -> Any:
    return sum(deps["square"])


condition = Flow("example_condition", timeout=10)


@condition.step()
def classify(flow_input: Any) -> Any:
    return {"big": flow_input["n"] > 10}


@condition.step(depends_on=[classify], if_={"classify": {"big": True}})
def big(deps: Any) -> Any:
    return "big"


@condition.step(depends_on=[classify], if_not={"classify": {"big": True}})
def small(deps: Any) -> Any:
    return "small"


flaky = Flow("example_flaky", base_delay=1, timeout=10)


@flaky.step()
def wobble(flow_input: Any, ctx: TaskContext) -> Any:
    """Fails on its first call for each run (counted in the ledger), then succeeds."""
    from testproject.example.models import LedgerEntry

    key = str(ctx.run_id)
    LedgerEntry.objects.create(flow=ctx.flow_slug, key=key, attempt=ctx.attempt)
    calls = LedgerEntry.objects.filter(flow=ctx.flow_slug, key=key).count()
    if calls == 1:
        raise RuntimeError("the first call fails on purpose")
    return {"calls": calls}


@flaky.step(depends_on=[wobble])
def patient(deps: Any, ctx: TaskContext) -> Any:
    """Asks for its own retry delay once."""
    if ctx.attempt == 1:
        raise Retry(delay=1)
    return {"attempt": ctx.attempt, "calls": deps["wobble"]["calls"]}


ledger = Flow("example_ledger", timeout=10)


@ledger.map(atomic=True)
def record(item: Any, ctx: TaskContext) -> Any:
    """Writes one ledger row per call inside the completion's transaction; an item
    ``{"sleep": s, "on_attempt": n}`` sleeps after writing, on attempt n only (default 1)."""
    from testproject.example.models import LedgerEntry

    LedgerEntry.objects.create(flow=ctx.flow_slug, key=f"{ctx.run_id}:{ctx.task_index}", attempt=ctx.attempt)
    if isinstance(item, dict) and item.get("sleep") and item.get("on_attempt", 1) == ctx.attempt:
        time.sleep(item["sleep"])
    return {"attempt": ctx.attempt}


sleepy = Flow("example_sleepy", timeout=10)


@sleepy.map()
def nap(item: Any, ctx: TaskContext) -> Any:
    """A plain (non-atomic) handler: sleeps ``item["sleep"]`` s on attempt ``item["on_attempt"]``."""
    if item.get("on_attempt", 1) == ctx.attempt:
        time.sleep(item.get("sleep", 0))
    return {"attempt": ctx.attempt}


# -- cooperative cancellation (docs/flow-control.md shows these two handlers)
crawl = Flow("example_crawl", timeout=60)


@crawl.step()
def pages(flow_input: Any, ctx: TaskContext) -> Any:
    done = 0
    for _page in range(flow_input["pages"]):
        if ctx.cancelled:
            break  # the run was cancelled: stop now, nothing returned is recorded
        time.sleep(0.1)  # fetch and store one page
        done += 1
    return {"done": done}


acrawl = Flow("example_acrawl", timeout=60)


@acrawl.step()
async def apages(flow_input: Any, ctx: TaskContext) -> Any:
    async def fetch_all() -> int:
        for _page in range(flow_input["pages"]):
            await asyncio.sleep(0.1)  # fetch and store one page
        return flow_input["pages"]

    work = asyncio.ensure_future(fetch_all())
    cancelled = asyncio.ensure_future(ctx.wait_cancelled())
    await asyncio.wait([work, cancelled], return_when=asyncio.FIRST_COMPLETED)
    loser = cancelled if work.done() else work
    loser.cancel()
    await asyncio.gather(loser, return_exceptions=True)
    return {"done": work.result() if not work.cancelled() else None}


# The support-thread pipeline, plain and step-queued (support.py), and its hand-written equivalent
# (support_manual.py): imported here so that workers register them.
from testproject.example.support import (  # noqa: E402, F401
    support_routed,
    support_routed_v2,
    support_thread,
    support_thread_steps,
)
from testproject.example.support_manual import (  # noqa: E402, F401
    support_ack,
    support_classify,
    support_route,
)
