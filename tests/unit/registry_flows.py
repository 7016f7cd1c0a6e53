"""Flows for the registry tests, loaded through PGFLOW["FLOWS"] dotted paths."""

from __future__ import annotations

from typing import Any

from pgflow_django import Flow

alpha = Flow("registry_alpha")
beta = Flow("registry_beta")
not_a_flow = 1


@alpha.step()
def first(flow_input: Any) -> Any:
    return flow_input
