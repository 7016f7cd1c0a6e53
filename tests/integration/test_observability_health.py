"""``pgflow_health``: exit 0 when healthy, 1 with one line per problem; the Kubernetes docs use the
worker's probes and a gauge the database-wide metrics serve."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pgflow_django import Flow, compile_flow, start_flows
from pgflow_django.db.connect import connection_params
from pgflow_django.management.health import problems
from pgflow_django.observability.metrics import DATABASE_GAUGES
from pgflow_django.runs.operations import pause
from pgflow_django.worker.connection import Engine, WorkerRegistration
from tests.integration.commands_support import manage_in_process
from tests.sql.support import q
from tests.workers import run_manage

pytestmark = pytest.mark.django_db(transaction=True)

DOC = Path(__file__).resolve().parents[2] / "docs" / "operations.md"

probed = Flow("otest_health", timeout=5)


@probed.step()
def one(flow_input: Any) -> Any:
    return flow_input


@probed.step(depends_on=[one])
def two(deps: Any) -> Any:
    return deps


@pytest.fixture
def flow(transactional_db: None) -> Iterator[Flow]:
    compile_flow(probed, on_change="replace")
    yield probed
    q("delete from pgflow.workers where queue_name = 'otest_health'")
    q("select pgflow.delete_flow_and_data('otest_health')")


def register(steps: tuple[str, ...]) -> Engine:
    """A live worker row for some steps, written by the worker's own registration."""
    engine = Engine(connection_params(), "test")
    engine.register(
        WorkerRegistration(
            worker_id=uuid.uuid4(),
            queue="otest_health",
            function_name="otest_health",
            support=tuple(("otest_health", step) for step in steps),
        )
    )
    return engine


def test_each_step_without_a_live_worker_is_a_problem(flow: Flow) -> None:
    assert problems(["otest_health"]) == [
        "no live worker runs flow otest_health step one; start manage.py pgflow_worker for it",
        "no live worker runs flow otest_health step two; start manage.py pgflow_worker for it",
    ]
    engine = register(("one",))
    try:
        assert problems(["otest_health"]) == [
            "no live worker runs flow otest_health step two; start manage.py pgflow_worker for it"
        ]
        engine.register(
            WorkerRegistration(uuid.uuid4(), "otest_health", "otest_health", (("otest_health", "two"),))
        )
        assert problems(["otest_health"]) == []
    finally:
        engine.close()


def test_old_visible_messages_and_pauses_are_problems(flow: Flow) -> None:
    engine = register(("one", "two"))
    try:
        start_flows(flow, [{}, {}])
        assert problems(["otest_health"], max_queue_age=60) == []
        q("update pgmq.q_otest_health set enqueued_at = clock_timestamp() - interval '120 seconds'")
        assert problems(["otest_health"], max_queue_age=60) == [
            "queue otest_health: oldest visible message is 120s old (limit 60s); add workers or check "
            "they are running"
        ]
        pause("otest_health")
        assert problems(["otest_health"])[0] == (
            "flow otest_health step one is paused (operator); "
            "clear it with manage.py pgflow_resume otest_health"
        )
    finally:
        engine.close()


def test_a_flow_not_compiled_is_a_problem(flow: Flow) -> None:
    assert problems(["otest_nowhere"]) == [
        "flow 'otest_nowhere' is not compiled in the database; run manage.py pgflow_compile otest_nowhere"
    ]


def test_the_command_exits_1_with_one_line_per_problem_and_0_when_healthy(flow: Flow) -> None:
    result = manage_in_process("pgflow_health", "--flow", "otest_health", settings={})
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        "no live worker runs flow otest_health step one; start manage.py pgflow_worker for it",
        "no live worker runs flow otest_health step two; start manage.py pgflow_worker for it",
    ]
    engine = register(("one", "two"))
    try:
        result = manage_in_process(
            "pgflow_health", "--flow", "otest_health", "--max-queue-age", "300", settings={}
        )
        assert (result.returncode, result.stdout.strip(), result.stderr) == (0, "ok", "")
    finally:
        engine.close()


def test_an_unreachable_database_is_one_line(flow: Flow) -> None:
    result = run_manage("postgresql://postgres@127.0.0.1:1/nothing", "pgflow_health")
    assert result.returncode == 1
    [line] = result.stderr.splitlines()
    assert line.startswith("cannot reach the database 'default'")


def test_the_kubernetes_example_probes_the_worker_port_and_scales_on_a_served_gauge() -> None:
    text = DOC.read_text(encoding="utf-8")
    port = re.search(r'"--metrics-port", "(\d+)"', text)
    assert port is not None and f"containerPort: {port.group(1)}" in text
    assert "httpGet: {path: /healthz, port: metrics}" in text
    assert "httpGet: {path: /readyz, port: metrics}" in text
    served = {metric for metric, _, _ in DATABASE_GAUGES.values()}
    scaled = re.findall(r"query: max\((\w+)\{", text) + re.findall(r"name: (pgflow_\w+)\n", text)
    assert scaled and set(scaled) <= served
