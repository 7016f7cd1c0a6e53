"""Two releases of the same flows for the rolling-deploy scenario (tests/acceptance/test_rolling_deploy.py)
and the version tests: release 1 runs ``first`` then ``second``; release 2 adds an ``audit`` step. Each
is also routed to one shared queue for both versions. ``PGFLOW_TEST_RELEASE`` (1 or 2) picks the release
a worker process of ``tests.versions_settings`` has the code of."""

from __future__ import annotations

import os
import time
from typing import Any

from pgflow_django import Flow, route_flow
from tests.ledger import record_execution

SHARED_QUEUE = "deploy_jobs"
STEP_SECONDS = float(os.environ.get("PGFLOW_TEST_STEP_SECONDS", "0.05"))


def release(number: int, slug: str) -> Flow:
    """The flow ``slug`` as release ``number`` defines it."""
    flow = Flow(slug, timeout=30)

    @flow.step
    def first(run_input: Any, ctx: Any) -> dict[str, Any]:
        record_execution(ctx)
        time.sleep(STEP_SECONDS)
        return {"release": number}

    @flow.step(depends_on=[first])
    def second(deps: Any, ctx: Any) -> dict[str, Any]:
        record_execution(ctx)
        time.sleep(STEP_SECONDS)
        return {"release": number, "first": deps["first"]}

    if number >= 2:

        @flow.step(depends_on=[second])
        def audit(deps: Any, ctx: Any) -> dict[str, Any]:
            record_execution(ctx)
            return {"audited": True}

    return flow


def routed_release(number: int, slug: str) -> Flow:
    """Release ``number`` of ``slug`` with every step on the shared queue ``SHARED_QUEUE``."""
    flow = release(number, slug)
    return route_flow(flow, queues=dict.fromkeys(flow.steps, SHARED_QUEUE))


RELEASE = int(os.environ.get("PGFLOW_TEST_RELEASE", "1"))
deploy = release(RELEASE, "deploy")
deploy_routed = routed_release(RELEASE, "deploy_routed")
