"""A sleeping flow for the restart scenario (tests/acceptance/test_durable_restart.py)."""

from __future__ import annotations

from typing import Any

from pgflow_django import Flow

nap = Flow("durable_nap", timeout=10)
nap.sleep("doze", seconds=5)


@nap.step(depends_on=["doze"])
def wake_up(deps: Any) -> dict[str, bool]:
    return {"woke": True}
