"""Calls of ``route_flow`` that mypy must reject; checked by tests/unit/test_route_flow_typing.py, never
imported or collected (no ``test_`` prefix). Each rejected line carries a ``# reject: CODE`` marker
with the mypy error code expected on that line."""

from __future__ import annotations

from typing import Any

from pgflow_django import Flow, route_flow

flow = Flow("typing_reject")


@flow.step()
def classify(thread: Any) -> str:
    return "ok"


route_flow(flow, queues=["classify"])  # reject: arg-type
route_flow(flow)  # reject: call-arg
route_flow(flow, {"classify": "thread_processing"})  # reject: call-arg
route_flow(flow, queues={"classify": 1})  # reject: dict-item
queue: int = route_flow(flow, queues={"classify": "q"}).queue_for("classify")  # reject: assignment
