"""``pgflow_delete_flow`` of a routed flow (issue 15, item 6): its shared queues stay, so the warning
about live workers, the confirmation and the final line say so instead of "its queue"; its workers'
support rows go, another flow's on the same queue stay."""

from __future__ import annotations

import io
import uuid
from typing import Any

import pytest

from pgflow_django import Flow, route_flow, start_flow
from pgflow_django.flows.compiler import compile_flow
from tests.integration.commands_support import call
from tests.sql.support import q, val

SHARED = "del_shared_q"
ROUTED, OTHER = "del_routed", "del_routed_other"


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def passthrough(value: Any) -> Any:
    return value


def routed(slug: str) -> Flow:
    flow = Flow(slug, timeout=5)
    flow.step(slug="work")(passthrough)
    return route_flow(flow, queues={"work": SHARED})


@pytest.fixture(autouse=True)
def flows() -> None:
    for slug in (ROUTED, OTHER):
        assert compile_flow(routed(slug)).status == "compiled"


def _worker(*flow_slugs: str) -> uuid.UUID:
    worker_id = uuid.uuid4()
    q(
        "insert into pgflow.workers (worker_id, queue_name, function_name) values (%s, %s, 'tests')",
        [worker_id, SHARED],
    )
    for slug in flow_slugs:
        q("insert into pgflow.worker_support values (%s, %s, 'work')", [worker_id, slug])
    return worker_id


def test_the_warning_and_the_result_name_the_shared_queues_that_stay() -> None:
    worker = _worker(ROUTED, OTHER)
    start_flow(ROUTED, {})
    kept = start_flow(OTHER, {})

    out, err = call("pgflow_delete_flow", ROUTED, "--yes")

    assert err.strip() == (
        f"warning: 1 live worker(s) on shared queue(s) {SHARED} support flow '{ROUTED}'; the queues stay "
        "and these workers keep running, but find no work of it any more: restart them without it"
    )
    assert "will fail once its queue is gone" not in err
    assert out.strip() == (
        f"deleted flow '{ROUTED}': 1 run(s) and its messages on shared queue(s) {SHARED} (the queues stay)"
    )
    assert val(f"select count(*) as n from pgmq.q_{SHARED}") == 1, "the other flow's message stays"
    assert val("select count(*) as n from pgflow.runs where run_id = %s", [kept]) == 1
    support = q("select flow_slug from pgflow.worker_support where worker_id = %s", [worker])
    assert support == [{"flow_slug": OTHER}]


def test_the_confirmation_names_the_shared_queues_that_stay() -> None:
    start_flow(ROUTED, {})
    out, _ = call("pgflow_delete_flow", ROUTED, stdin=FakeTerminal(f"{ROUTED}\n"))
    assert (
        f"This deletes flow '{ROUTED}' with its 1 run(s), 1 still in progress, their tasks and its "
        f"messages on shared queue(s) {SHARED} (the queues stay)."
    ) in out
