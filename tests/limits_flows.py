"""Flows of the flow-control worker scenarios (``tests/acceptance/test_flow_control_workers.py``),
registered in worker subprocesses by ``tests/limits_settings.py``.

Each handler sleeps the milliseconds its run input names and returns its own start and end (wall
clock, seconds), a second ledger beside the claim and completion times the database keeps.
"""

from __future__ import annotations

import time
from typing import Any

from pgflow_django import Concurrency, Flow, RateLimit

KEYED_FLOW = "lim_keyed"
RATED_FLOW = "lim_rated"
LIMIT = 4
"""At most this many tasks of one key started at once (the keyed flow's Concurrency)."""
RATE = "10/s"
"""The rated step's limit per key (burst 1)."""

keyed = Flow(KEYED_FLOW, timeout=60, max_attempts=1, concurrency=Concurrency(limit=LIMIT, key="key"))


@keyed.step()
def work(flow_input: dict[str, Any]) -> dict[str, float]:
    started = time.time()
    time.sleep(flow_input["ms"] / 1000)
    return {"t0": started, "t1": time.time()}


rated = Flow(RATED_FLOW, timeout=60, max_attempts=1)


@rated.step(rate_limit=RateLimit(RATE, key="key"))
def tick(flow_input: dict[str, Any]) -> dict[str, float]:
    return {"t0": time.time()}
