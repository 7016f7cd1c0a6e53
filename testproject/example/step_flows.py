"""A step-queued flow for the worker tests: every step has a private queue and its own workers
(``pgflow_worker --flow example_steps --step <step>``). Registered by ``tests/step_settings.py``.

The plain flow is built inside a function so that only the step-queued one is a module attribute (the
registry would otherwise see two different flows under one slug).
"""

from __future__ import annotations

from typing import Any

from pgflow_django import Flow, StepQueuedFlow, with_step_queues

STEP_FLOW = "example_steps"


def _support_pipeline() -> Flow:
    """classify -> enrich (one task per word) -> deliver, a support-thread pipeline in miniature."""
    flow = Flow(STEP_FLOW, timeout=10)

    @flow.step()
    def classify(thread: Any) -> list[str]:
        return [word.lower() for word in str(thread["text"]).split()]

    @flow.map(array=classify)
    def enrich(word: Any) -> dict[str, Any]:
        return {"word": word, "length": len(word)}

    @flow.step(depends_on=[enrich])
    def deliver(deps: Any) -> dict[str, Any]:
        return {"words": len(deps["enrich"]), "letters": sum(item["length"] for item in deps["enrich"])}

    return flow


example_steps: StepQueuedFlow = with_step_queues(_support_pipeline())
