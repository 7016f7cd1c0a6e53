"""OpenTelemetry traces, with ``opentelemetry-api`` (the ``[otel]`` extra); a no-op without it.

``start_flow``/``start_flows`` (and so a Django task's ``enqueue``) record the caller's W3C trace
context on the run (``pgflow.runs.trace_context``) when the caller is inside a trace. The worker
opens one span per task attempt as a child of that context, so one trace shows the web request and
every step of its run. Without an SDK (a tracer provider) configured, OpenTelemetry's API hands out
non-recording spans and the worker skips the trace-context lookup altogether.
"""

from __future__ import annotations

import functools
import hashlib
import json
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Final, Protocol

TRACER_NAME: Final = "pgflow_django"

try:
    from opentelemetry import context as otel_context
    from opentelemetry import propagate, trace
    from opentelemetry.trace import SpanKind, Status, StatusCode
except ImportError:  # the [otel] extra is not installed: tracing is off
    trace = None  # type: ignore[assignment]


def installed() -> bool:
    return trace is not None


@functools.cache
def _tracer() -> Any:
    """One tracer for the process: the SDK builds a new one per ``get_tracer`` call (most of a span's
    cost), and a tracer taken before the provider is set follows it once it is."""
    assert trace is not None
    return trace.get_tracer(TRACER_NAME)


def current_context() -> str | None:
    """The caller's trace context as JSON (``traceparent``, ``tracestate``), or None outside a trace."""
    if trace is None or not trace.get_current_span().get_span_context().is_valid:
        return None
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return json.dumps(carrier, sort_keys=True) if carrier else None


def record_on_runs(cursor: Any, run_ids: Sequence[uuid.UUID], context: str) -> None:
    """Store ``context`` on runs just started, in the caller's transaction."""
    from pgflow_django.db.query import fetch_value
    from pgflow_django.observability import queries

    fetch_value(cursor, queries.SET_TRACE_CONTEXT, [context, list(run_ids)])


def recording() -> bool:
    """True when an SDK is configured: spans record, so looking up runs' contexts is worth its query."""
    if trace is None:
        return False
    return bool(_tracer().start_span("probe").is_recording())


def run_sampled(run_id: uuid.UUID, rate: float) -> bool:
    """Whether the worker traces a run started outside any trace, from its id alone, so that every
    task of the run is traced or none is, and every worker agrees without asking the others: the
    first 8 bytes of the BLAKE2b digest of the id's 16 bytes, read as a big-endian number, are below
    ``rate`` x 2**64 (``PGFLOW["TRACE_SAMPLE_RATE"]``)."""
    if rate >= 1.0:
        return True
    if rate <= 0.0:
        return False
    digest = hashlib.blake2b(run_id.bytes, digest_size=8).digest()
    return int.from_bytes(digest, "big") < rate * 2.0**64


def parent_sampled(context: Any) -> bool | None:
    """The sampled flag of the trace a run was started in (``parent_context``), or None when the run
    records no valid trace context."""
    if context is None or trace is None:
        return None
    span_context = trace.get_current_span(context).get_span_context()
    if not span_context.is_valid:
        return None
    return bool(span_context.trace_flags.sampled)


def parent_context(carrier: dict[str, str] | None) -> Any:
    """The OpenTelemetry context a run's recorded carrier names (None: start a new trace); parsed
    once per run by the worker."""
    return propagate.extract(carrier) if carrier and trace is not None else None


class TracedTask(Protocol):
    """What a task span names (the worker's claimed task has it)."""

    @property
    def flow_slug(self) -> str: ...
    @property
    def step_slug(self) -> str: ...
    @property
    def task_index(self) -> int: ...
    @property
    def attempt(self) -> int: ...
    @property
    def run_id(self) -> uuid.UUID: ...
    @property
    def queue(self) -> str: ...
    @property
    def message_id(self) -> int: ...


SPAN_ATTRIBUTES: Final = (
    "pgflow.flow",
    "pgflow.step",
    "pgflow.task_index",
    "pgflow.attempt",
    "pgflow.run_id",
    "messaging.system",
    "messaging.destination.name",
    "messaging.message.id",
)
"""What a task span carries: the work it is (the queue is the messaging destination)."""


def span_attributes(task: TracedTask) -> dict[str, Any]:
    """A task span's attributes (``SPAN_ATTRIBUTES``): what identifies the attempt, with OpenTelemetry's
    messaging conventions for the message it came in (``messaging.system`` is ``pgmq``)."""
    return {
        "pgflow.flow": task.flow_slug,
        "pgflow.step": task.step_slug,
        "pgflow.task_index": task.task_index,
        "pgflow.attempt": task.attempt,
        "pgflow.run_id": str(task.run_id),
        "messaging.system": "pgmq",
        "messaging.destination.name": task.queue or task.flow_slug.lower(),
        "messaging.message.id": str(task.message_id),
    }


class OpenSpan:
    """A task attempt's span, current on the handler's thread until ``close`` (the worker's hot path
    opens and closes it inline, without a context manager)."""

    __slots__ = ("span", "token")

    def __init__(self, task: TracedTask, context: Any) -> None:
        self.span = _tracer().start_span(
            f"pgflow {task.flow_slug}.{task.step_slug}",
            context=context,
            kind=SpanKind.CONSUMER,
            attributes=span_attributes(task),
        )
        self.token = otel_context.attach(trace.set_span_in_context(self.span))

    def close(self, error: BaseException | None = None) -> None:
        """End the span: OK, or with ``error`` (an ``Exception``) recorded and the status set to error,
        as ``start_as_current_span`` does; any other ``BaseException`` leaves the status unset."""
        otel_context.detach(self.token)
        span = self.span
        if error is None:
            span.set_status(Status(StatusCode.OK))
        elif isinstance(error, Exception):
            span.record_exception(error)
            span.set_status(Status(StatusCode.ERROR, f"{type(error).__name__}: {error}"))
        span.end()


@contextmanager
def task_span(task: TracedTask, context: Any) -> Iterator[None]:
    """One span per task attempt, a child of ``context`` (``parent_context``) when there is one; an
    exception is recorded and sets the span's status to error, then propagates unchanged."""
    with _tracer().start_as_current_span(
        f"pgflow {task.flow_slug}.{task.step_slug}",
        context=context,
        kind=SpanKind.CONSUMER,
        attributes=span_attributes(task),
        record_exception=True,
        set_status_on_exception=True,
    ) as span:
        yield
        span.set_status(Status(StatusCode.OK))
