"""Head sampling of the worker's task spans (``PGFLOW["TRACE_SAMPLE_RATE"]``), with the real
OpenTelemetry SDK: the decision is per run, from the run id alone (so all tasks of a run agree and so
do all workers), and a run started inside a trace follows that trace's own decision."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from pgflow_django.conf import get_settings
from pgflow_django.observability import tracing
from pgflow_django.worker.connection import ClaimedTask
from pgflow_django.worker.observe import Observer

RUNS = [uuid.uuid5(uuid.NAMESPACE_URL, f"pgflow-sampling-{n}") for n in range(40)]
TASKS_PER_RUN = 3


@pytest.fixture(scope="module")
def exporter() -> Iterator[InMemorySpanExporter]:
    """The SDK in this process (one global provider per process: another module's is reused)."""
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
    found = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(found))
    yield found
    found.shutdown()


def task(run_id: uuid.UUID, index: int, context: dict[str, str] | None = None) -> ClaimedTask:
    """A claimed task; ``context`` is the trace context a traced claim read with it."""
    return ClaimedTask(
        flow_slug="sampled",
        run_id=run_id,
        step_slug="each",
        task_index=index,
        message_id=1000 + index,
        attempt=1,
        input=None,
        queue="sampled",
        trace_context=context,
    )


def handle(observer: Observer, claimed: ClaimedTask) -> None:
    with observer.handling(claimed):
        pass


def drain(
    exporter: InMemorySpanExporter,
    rate: float,
    runs: Sequence[uuid.UUID] = RUNS,
    contexts: dict[uuid.UUID, dict[str, str]] | None = None,
) -> dict[str, list[Any]]:
    """Claim and handle every task of ``runs`` at ``rate``, each carrying its run's trace context
    from ``contexts``: the finished spans by run id."""
    exporter.clear()
    observer = Observer(worker_id=uuid.uuid4(), queue="sampled")
    with override_settings(PGFLOW={"TRACE_SAMPLE_RATE": rate}):
        observer.tracing = True
    found = contexts or {}
    tasks = [task(run_id, index, found.get(run_id)) for index in range(TASKS_PER_RUN) for run_id in runs]
    observer.claimed(tasks, 0.001)
    for claimed in tasks:
        handle(observer, claimed)
    spans: dict[str, list[Any]] = {}
    for span in exporter.get_finished_spans():
        spans.setdefault(str((span.attributes or {})["pgflow.run_id"]), []).append(span)
    return spans


def hash_picks(run_id: uuid.UUID, rate: float) -> bool:
    """The documented rule, written out again."""
    digest = hashlib.blake2b(run_id.bytes, digest_size=8).digest()
    return int.from_bytes(digest, "big") < rate * 2**64


def test_rate_0_records_no_span(exporter: InMemorySpanExporter) -> None:
    assert drain(exporter, 0.0) == {}


def test_rate_1_records_every_attempt(exporter: InMemorySpanExporter) -> None:
    spans = drain(exporter, 1.0)
    assert sorted(spans) == sorted(map(str, RUNS))
    assert all(len(found) == TASKS_PER_RUN for found in spans.values())
    first = spans[str(RUNS[0])][0]
    assert first.name == "pgflow sampled.each" and first.kind == trace.SpanKind.CONSUMER
    assert dict(first.attributes or {}) == {
        "pgflow.flow": "sampled",
        "pgflow.step": "each",
        "pgflow.task_index": first.attributes["pgflow.task_index"],
        "pgflow.attempt": 1,
        "pgflow.run_id": str(RUNS[0]),
        "messaging.system": "pgmq",
        "messaging.destination.name": "sampled",
        "messaging.message.id": str(1000 + first.attributes["pgflow.task_index"]),
    }


def test_rate_half_records_the_runs_the_hash_picks_with_all_their_tasks(
    exporter: InMemorySpanExporter,
) -> None:
    picked = {str(run_id) for run_id in RUNS if hash_picks(run_id, 0.5)}
    assert 0 < len(picked) < len(RUNS)
    spans = drain(exporter, 0.5)
    assert set(spans) == picked
    assert all(len(found) == TASKS_PER_RUN for found in spans.values())
    assert all(tracing.run_sampled(run_id, 0.5) == (str(run_id) in picked) for run_id in RUNS)
    again = drain(exporter, 0.5)
    assert set(again) == picked, "another worker decides alike"


def traceparent(sampled: bool) -> tuple[str, str]:
    span_id = "00f067aa0ba902b7"
    return f"00-4bf92f3577b34da6a3ce929d0e0e4736-{span_id}-{'01' if sampled else '00'}", span_id


def test_a_run_started_in_a_trace_follows_its_decision(exporter: InMemorySpanExporter) -> None:
    rate = 0.5
    left_out = next(run_id for run_id in RUNS if not hash_picks(run_id, rate))
    picked = next(run_id for run_id in RUNS if hash_picks(run_id, rate))
    sampled_parent, span_id = traceparent(True)
    unsampled_parent, _ = traceparent(False)
    contexts = {left_out: {"traceparent": sampled_parent}, picked: {"traceparent": unsampled_parent}}
    spans = drain(exporter, rate, [left_out, picked], contexts)
    assert set(spans) == {str(left_out)}
    for span in spans[str(left_out)]:
        assert span.parent is not None and format(span.parent.span_id, "016x") == span_id


def test_a_run_whose_context_is_unreadable_is_sampled_by_its_id(exporter: InMemorySpanExporter) -> None:
    contexts = {run_id: {"traceparent": "not a traceparent"} for run_id in RUNS}
    spans = drain(exporter, 0.5, RUNS, contexts)
    assert set(spans) == {str(run_id) for run_id in RUNS if hash_picks(run_id, 0.5)}
    assert all(span.parent is None for found in spans.values() for span in found)


@pytest.mark.parametrize("value", [1.5, -0.1, "0.5", True, None])
def test_the_rate_is_a_number_from_0_to_1(value: Any) -> None:
    with (
        override_settings(PGFLOW={"TRACE_SAMPLE_RATE": value}),
        pytest.raises(ImproperlyConfigured) as raised,
    ):
        get_settings()
    assert str(raised.value).startswith("PGFLOW['TRACE_SAMPLE_RATE'] must be a number from 0 to 1, got ")


def test_the_rate_defaults_to_every_run() -> None:
    with override_settings(PGFLOW={}):
        assert get_settings().trace_sample_rate == 1.0
    with override_settings(PGFLOW={"TRACE_SAMPLE_RATE": 0}):
        assert get_settings().trace_sample_rate == 0.0
