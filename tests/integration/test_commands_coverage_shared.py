"""``pgflow_coverage`` on shared queues (issue 6, item 7): for one queue used by two routed flows (and a
draining older version), every (flow, step) its persisted routes and live task snapshots need is
listed on its own, and a worker's support row for (A, s) on that queue covers exactly (A, s): not A's
other steps on the queue, not B's step, not (A, s) on another queue. Workers are simulated by
``pgflow.workers`` and ``pgflow.worker_support`` rows, as in ``test_commands_coverage``."""

from __future__ import annotations

import json
from typing import Any

import pytest

from pgflow_django import Flow, route_flow, start_flow
from pgflow_django.flows.compiler import compile_flow
from pgflow_django.runs.coverage import RouteCoverage, coverage
from tests.integration.test_commands_coverage import add_worker, run_command, table
from tests.sql.support import q

FAST, BULK = "sq_cov_fast", "sq_cov_bulk"


def passthrough(value: Any) -> Any:
    return value


def flow_a() -> Flow:
    """classify and enrich on FAST, deliver on BULK."""
    flow = Flow("sq_cov_a", timeout=5)
    flow.step(slug="classify")(passthrough)
    flow.step(slug="enrich", depends_on=["classify"])(passthrough)
    flow.step(slug="deliver", depends_on=["enrich"])(passthrough)
    return route_flow(flow, queues={"classify": FAST, "enrich": FAST, "deliver": BULK})


def flow_b() -> Flow:
    """fetch on FAST."""
    flow = Flow("sq_cov_b", timeout=5)
    flow.step(slug="fetch")(passthrough)
    return route_flow(flow, queues={"fetch": FAST})


@pytest.fixture(autouse=True)
def routed_flows() -> None:
    for flow in (flow_a(), flow_b()):
        assert compile_flow(flow).status == "compiled"


def on_queue(queue: str) -> list[tuple[str, str, str, bool, int, int]]:
    """(flow, step, mode, in_route, pending, live) of every row of ``queue``, in the report's order."""
    rows: list[RouteCoverage] = [r for r in coverage() if r.queue_name == queue]
    return [
        (r.flow_slug, r.step_slug, r.queue_mode, r.in_route, r.pending_tasks, r.live_workers) for r in rows
    ]


def test_each_flow_and_step_of_a_shared_queue_is_listed_on_its_own() -> None:
    assert on_queue(FAST) == [
        ("sq_cov_a", "classify", "routed", True, 0, 0),
        ("sq_cov_a", "enrich", "routed", True, 0, 0),
        ("sq_cov_b", "fetch", "routed", True, 0, 0),
    ]
    assert on_queue(BULK) == [("sq_cov_a", "deliver", "routed", True, 0, 0)]


def test_a_support_row_covers_exactly_its_flow_and_step_on_its_queue() -> None:
    add_worker(FAST, "sq_cov_a", "classify")
    add_worker(BULK, "sq_cov_a", "enrich")  # right flow and step, wrong queue
    add_worker(FAST, "sq_cov_b", "classify")  # right queue and step name, wrong flow
    assert on_queue(FAST) == [
        ("sq_cov_a", "classify", "routed", True, 0, 1),
        ("sq_cov_a", "enrich", "routed", True, 0, 0),
        ("sq_cov_b", "fetch", "routed", True, 0, 0),
    ]
    assert on_queue(BULK) == [("sq_cov_a", "deliver", "routed", True, 0, 0)]

    add_worker(FAST, "sq_cov_a", "classify", "enrich")
    add_worker(FAST, "sq_cov_b", "fetch")
    add_worker(BULK, "sq_cov_a", "deliver")
    assert [row[-1] for row in on_queue(FAST)] == [2, 1, 1]
    assert [row[-1] for row in on_queue(BULK)] == [1]


def test_pending_tasks_of_each_flow_count_separately() -> None:
    start_flow("sq_cov_a", {"n": 1})
    start_flow("sq_cov_b", {"n": 1})
    start_flow("sq_cov_b", {"n": 2})
    assert [(row[0], row[1], row[4]) for row in on_queue(FAST)] == [
        ("sq_cov_a", "classify", 1),
        ("sq_cov_a", "enrich", 0),
        ("sq_cov_b", "fetch", 2),
    ]


def test_an_older_versions_tasks_left_on_the_queue_need_its_handler() -> None:
    """Tasks whose snapshot names the shared queue after the route moved (an older version draining)."""
    start_flow("sq_cov_a", {"n": 1})
    q("update pgflow.step_tasks set queue_name = %s where flow_slug = 'sq_cov_a'", [BULK])
    rows = {(r.flow_slug, r.step_slug, r.queue_name): r for r in coverage(flow="sq_cov_a")}
    drained = rows["sq_cov_a", "classify", BULK]
    assert (drained.in_route, drained.pending_tasks, drained.covered) == (False, 1, False)
    add_worker(BULK, "sq_cov_a", "classify")
    assert {(r.step_slug, r.queue_name): r.covered for r in coverage(flow="sq_cov_a")}[("classify", BULK)]


def test_the_command_lists_the_missing_handlers_of_one_flow_and_exits_3() -> None:
    add_worker(FAST, "sq_cov_a", "classify")
    code, out, err = run_command("--flow", "sq_cov_a")
    assert code == 3, out + err
    assert table(out) == [
        ["FLOW", "STEP", "QUEUE", "MODE", "PENDING", "LIVE", "NOTE"],
        ["sq_cov_a", "enrich", FAST, "routed", "0", "0"],
        ["sq_cov_a", "deliver", BULK, "routed", "0", "0"],
    ]
    add_worker(FAST, "sq_cov_a", "enrich")
    add_worker(BULK, "sq_cov_a", "deliver")
    code, out, _ = run_command("--format", "json", "--flow", "sq_cov_a", "--all")
    report = json.loads(out)
    assert (code, report["ok"], report["uncovered"]) == (0, True, 0)
    code, out, _ = run_command("--format", "json", "--flow", "sq_cov_b")
    assert (code, json.loads(out)["uncovered"]) == (3, 1), "B's step on the same queue is still missing"
