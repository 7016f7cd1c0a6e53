"""Flows for the system-check tests, one module per finding (loaded through PGFLOW["FLOWS"] paths).

The DSL already refuses bad slugs when a flow is defined, so flows that break the rules are made by
editing valid ones afterwards: the checks must still catch what some other code path built.
"""

from __future__ import annotations

from typing import Any

from pgflow_django import Flow

good = Flow("checks_good")


@good.step()
def fetch(flow_input: Any) -> Any:
    return flow_input


@good.step(depends_on=[fetch])
def store(deps: Any) -> Any:
    return deps


good_again = Flow("checks_good")
"""A second, different flow with ``good``'s slug."""

good_in_capitals = Flow("Checks_Good")
"""Differs from ``good`` only in case: both would use the queue ``checks_good``."""

bad_flow_slug = Flow("checks_bad_flow_slug")
bad_flow_slug._slug = bad_flow_slug._stored_slug = "checks__bad"

long_queue = Flow("checks_long_queue")
long_queue._slug = long_queue._stored_slug = "checks_" + "x" * 45
"""A valid slug (52 characters), but a queue name longer than PGMQ's 47."""

bad_step_slug = Flow("checks_bad_step_slug")


@bad_step_slug.step()
def ok_step(flow_input: Any) -> Any:
    return flow_input


bad_step_slug._steps = {"_bad_step": bad_step_slug._steps["ok_step"]}

case_steps = Flow("checks_case_steps")


@case_steps.step()
def load(flow_input: Any) -> Any:
    return flow_input


case_steps._steps["Load"] = case_steps._steps["load"]
