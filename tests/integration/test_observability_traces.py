"""OpenTelemetry: a traced start records the caller's W3C context on the run, and a real worker
process (with the SDK, exporting to a file) opens one span per task attempt as its child, so one trace
holds the request and every step of its run. The caller's side uses the SDK's in-memory exporter."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from pgflow_django import compile_flow, start_flow, start_flows, wait_for_run
from pgflow_django.flows.registry import get_flow
from pgflow_django.observability import tracing
from tests.sql.support import val
from tests.workers import Spawner, WorkerProcess

pytestmark = pytest.mark.django_db(transaction=True)

EXPORTER = InMemorySpanExporter()


@pytest.fixture(scope="module", autouse=True)
def sdk() -> Iterator[None]:
    """The SDK in this process (OpenTelemetry allows one global provider per process)."""
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(EXPORTER))
    trace.set_tracer_provider(provider)
    yield
    EXPORTER.clear()


@pytest.fixture
def spans_file(tmp_path: Path) -> Path:
    return tmp_path / "spans.jsonl"


@pytest.fixture
def traced_worker(
    spawn_worker: Spawner, spans_file: Path, monkeypatch: pytest.MonkeyPatch
) -> Callable[..., WorkerProcess]:
    def spawn(flow: str, *args: str) -> WorkerProcess:
        with monkeypatch.context() as patch:
            patch.setenv("DJANGO_SETTINGS_MODULE", "tests.otel_settings")
            patch.setenv("PGFLOW_TEST_SPANS", str(spans_file))
            return spawn_worker(flow, *args)

    return spawn


def exported(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


def test_a_start_outside_a_trace_records_nothing(clean_example_flows: None) -> None:
    compile_flow(get_flow("example_chain"))
    run_id = start_flow("example_chain", {"n": 1})
    assert val("select trace_context from pgflow.runs where run_id = %s", [run_id]) is None
    assert tracing.current_context() is None


def test_each_task_attempt_is_a_span_in_the_starting_trace(
    traced_worker: Callable[..., WorkerProcess], spans_file: Path
) -> None:
    worker = traced_worker("example_flaky", "--poll-interval", "0.2")
    tracer = trace.get_tracer("tests")
    with tracer.start_as_current_span("POST /orders") as request:
        run_id = start_flow("example_flaky", {})
    recorded = val("select trace_context from pgflow.runs where run_id = %s", [run_id])
    trace_id = format(request.get_span_context().trace_id, "032x")
    span_id = format(request.get_span_context().span_id, "016x")
    assert recorded["traceparent"].startswith(f"00-{trace_id}-{span_id}-")
    assert wait_for_run(run_id, timeout=30).status == "completed"
    worker.terminate()
    assert worker.wait(20) == 0
    spans = [span for span in exported(spans_file) if span["attributes"].get("pgflow.run_id") == str(run_id)]
    attempts = sorted((s["attributes"]["pgflow.step"], s["attributes"]["pgflow.attempt"]) for s in spans)
    assert attempts == [("patient", 1), ("patient", 2), ("wobble", 1), ("wobble", 2)]
    for span in spans:
        assert span["context"]["trace_id"] == f"0x{trace_id}"
        assert span["parent_id"] == f"0x{span_id}"
        assert span["kind"] == "SpanKind.CONSUMER"
        assert span["name"] == f"pgflow example_flaky.{span['attributes']['pgflow.step']}"
        attributes = span["attributes"]
        assert sorted(attributes) == sorted(tracing.SPAN_ATTRIBUTES)
        assert attributes["pgflow.flow"] == "example_flaky"
        assert attributes["messaging.destination.name"] == "example_flaky"
        assert attributes["messaging.system"] == "pgmq" and attributes["pgflow.task_index"] == 0
        assert attributes["messaging.message.id"].isdigit()
    failed = [s for s in spans if s["attributes"]["pgflow.attempt"] == 1]
    assert {s["status"]["status_code"] for s in failed} == {"ERROR"}
    wobble = next(s for s in failed if s["attributes"]["pgflow.step"] == "wobble")
    assert [event["name"] for event in wobble["events"]] == ["exception"]
    assert "the first call fails on purpose" in wobble["events"][0]["attributes"]["exception.message"]
    assert {s["status"]["status_code"] for s in spans if s["attributes"]["pgflow.attempt"] == 2} == {"OK"}


def test_start_flows_records_the_context_on_every_run(clean_example_flows: None) -> None:
    compile_flow(get_flow("example_chain"))
    with trace.get_tracer("tests").start_as_current_span("batch"):
        run_ids = start_flows("example_chain", [{"n": 1}, {"n": 2}])
    contexts = {
        val("select trace_context ->> 'traceparent' from pgflow.runs where run_id = %s", [run_id])
        for run_id in run_ids
    }
    assert len(contexts) == 1 and next(iter(contexts)).startswith("00-")


def test_a_django_task_enqueued_inside_a_trace_records_it(transactional_db: None) -> None:
    from testproject.example.tasks import add
    from tests.tasks_support import clean_task_flows

    try:
        with trace.get_tracer("tests").start_as_current_span("POST /signup") as request:
            result = add.enqueue(1, 2)
        trace_id = format(request.get_span_context().trace_id, "032x")
        recorded = val(
            "select trace_context ->> 'traceparent' from pgflow.runs where run_id = %s",
            [uuid.UUID(result.id)],
        )
        assert recorded.startswith(f"00-{trace_id}-")
    finally:
        clean_task_flows()
