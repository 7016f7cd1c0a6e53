"""What the worker tells the outside about its work: metrics, signals, log fields, trace spans.

The claim loop, the runner and the completer call one :class:`Observer` at a few points (a claim, a
handler's run, recorded results, recovery, a pause, a release); everything optional stays off their
path: with no metrics port, no signal receiver and no tracer, each call is a few attribute reads.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Final

from pgflow_django import signals
from pgflow_django.flows.slugs import version_of
from pgflow_django.observability import tracing
from pgflow_django.observability.tracing import OpenSpan
from pgflow_django.worker.connection import Claim, ClaimedTask
from pgflow_django.worker.subscription import Subscription

if TYPE_CHECKING:
    from pgflow_django.observability.metrics import WorkerMetrics
    from pgflow_django.worker.queries import Transition

logger = logging.getLogger("pgflow_django.worker")

Result = tuple[ClaimedTask, str, str | None]
"""A recorded result: the task, the outcome the engine returned, the error text of a failure."""
TRACE_CONTEXT_CACHE: Final = 10_000
"""Runs whose trace context the claim loop remembers; past that it starts over."""
Transitions = Callable[[Sequence[ClaimedTask]], "list[Transition]"]
"""Looks up what some just-recorded results changed (on the connection that recorded them)."""

UNSAMPLED: Final[Any] = object()
"""A run the worker does not trace (``PGFLOW["TRACE_SAMPLE_RATE"]``), in ``Observer.trace_contexts``."""
_UNKNOWN: Final[Any] = object()

FAILED_OUTCOMES: Final = frozenset({"failed", "skipped"})
"""``fail_task``/``reject_task`` outcomes of a task out of attempts (skipped: its step is skipped)."""


SHARED_WARNINGS = {
    "unmatched": "match no task: left in the queue untouched (applications must not send to queues "
    "pgflow manages)",
}
"""Shared-queue claim outcomes that are not this worker's to run: warned about, never stop the worker
(``unsupported`` work is named once per flow step, by ``UnsupportedWork``)."""


def log_fields(task: ClaimedTask, worker_id: uuid.UUID | None = None) -> dict[str, Any]:
    """The ``extra`` of every log record about a task: structured fields a JSON formatter or an error
    tracker picks up (the message id as a decimal string, as everywhere ids leave the engine)."""
    fields: dict[str, Any] = {
        "pgflow_flow": task.flow_slug,
        "pgflow_step": task.step_slug,
        "pgflow_run_id": str(task.run_id),
        "pgflow_task_index": task.task_index,
        "pgflow_attempt": task.attempt,
        "pgflow_queue": task.queue or task.flow_slug.lower(),
        "pgflow_msg_id": str(task.message_id),
    }
    if worker_id is not None:
        fields["pgflow_worker_id"] = str(worker_id)
    return fields


class Observer:
    """One claim loop's instrumentation; ``metrics`` is None without ``--metrics-port``."""

    def __init__(
        self, worker_id: uuid.UUID | None = None, queue: str = "", metrics: WorkerMetrics | None = None
    ) -> None:
        self.worker_id = worker_id
        self.queue = queue
        self.metrics = metrics
        self.last_beat = time.monotonic()
        """When the claim loop last went round (``/healthz``)."""
        self.database_ok = False
        """The last claim reached the database (``/readyz``); False until the first one."""
        self._tracing = False
        self.sample_rate = 1.0
        """``PGFLOW["TRACE_SAMPLE_RATE"]``, read when tracing is turned on."""
        self.trace_contexts: dict[uuid.UUID, Any] = {}
        """Runs' recorded trace contexts, parsed (None: the run has none; ``UNSAMPLED``: the run is
        not traced), looked up and sampled once per run."""
        self.fields: dict[str, Any] = {"pgflow_queue": queue}
        """The ``extra`` of the claim loop's own log records (about its queue, not one task)."""
        if worker_id is not None:
            self.fields["pgflow_worker_id"] = str(worker_id)

    @property
    def tracing(self) -> bool:
        """An OpenTelemetry SDK records spans and some runs are sampled: each handler call of a
        sampled run gets a span (``tracing.task_span``)."""
        return self._tracing

    @tracing.setter
    def tracing(self, on: bool) -> None:
        if on:
            from pgflow_django.conf import get_settings

            self.sample_rate = get_settings().trace_sample_rate
        self._tracing = on and self.sample_rate > 0.0

    def log(self, task: ClaimedTask) -> dict[str, Any]:
        return log_fields(task, self.worker_id)

    def _queue_of(self, task: ClaimedTask) -> str:
        return task.queue or self.queue or task.flow_slug.lower()

    # -- the claim loop ----------------------------------------------------------------------------

    def beat(self) -> None:
        self.last_beat = time.monotonic()

    def claimed(self, tasks: Sequence[ClaimedTask], seconds: float, queue: str = "") -> None:
        """A claim (on ``queue``, by default the worker's) returned ``tasks``; with tracing on, each
        run not seen yet is decided here, once, from the trace context its task carries."""
        self.database_ok = True
        if self.tracing and tasks:
            self._remember_contexts(tasks)
        metrics = self.metrics
        if metrics is None:
            return
        metrics.child(metrics.claim_duration, queue or self.queue).observe(seconds)
        counts: dict[tuple[str, str, str], int] = {}
        for task in tasks:
            labels = (task.flow_slug, task.step_slug, self._queue_of(task))
            counts[labels] = counts.get(labels, 0) + 1
        for labels, count in counts.items():
            metrics.child(metrics.claimed, *labels).inc(count)

    def _remember_contexts(self, tasks: Sequence[ClaimedTask]) -> None:
        known = self.trace_contexts
        found = {task.run_id: task.trace_context for task in tasks if task.run_id not in known}
        if not found:
            return
        if len(known) > TRACE_CONTEXT_CACHE:
            known.clear()
        rate = self.sample_rate
        run_sampled = tracing.run_sampled
        for run_id, carrier in found.items():
            if carrier is None:  # most runs: started outside any trace, sampled by their id
                known[run_id] = None if run_sampled(run_id, rate) else UNSAMPLED
                continue
            # a run started inside a trace follows that trace's decision
            context = tracing.parent_context(carrier)
            follow = tracing.parent_sampled(context)
            sampled = run_sampled(run_id, rate) if follow is None else follow
            known[run_id] = context if sampled else UNSAMPLED

    def _parent(self, run_id: uuid.UUID) -> Any:
        """The context a sampled run's spans are children of (None: a new trace), or ``UNSAMPLED``;
        a run whose context could not be read is sampled by its id alone."""
        parent = self.trace_contexts.get(run_id, _UNKNOWN)
        if parent is _UNKNOWN:
            return None if tracing.run_sampled(run_id, self.sample_rate) else UNSAMPLED
        return parent

    def unclaimed(self, conn: Any, sub: Subscription, claim: Claim) -> None:
        """Say what a claim read but did not turn into tasks (and, at debug level, what it claimed)."""
        for outcome, meaning in SHARED_WARNINGS.items():
            ids = claim.unclaimed.get(outcome, [])
            if ids:
                logger.warning(
                    "%d message(s) %s queue=%s msg_ids=%s",
                    len(ids),
                    meaning,
                    sub.queue,
                    ",".join(map(str, ids)),
                    extra=self.fields,
                )
        if claim.unclaimed.get("unsupported"):
            sub.unsupported.report(conn, claim.unclaimed["unsupported"])
        foreign = claim.unclaimed.get("foreign", [])
        if foreign:
            logger.warning(
                "archived %d foreign message(s) queue=%s msg_ids=%s (not pgflow work: applications "
                "must not send to queues pgflow owns)",
                len(foreign),
                sub.queue,
                ",".join(map(str, foreign)),
                extra=self.fields,
            )
        if claim.read_count and logger.isEnabledFor(logging.DEBUG):
            logger.debug(
                "claimed %d of %d message(s) queue=%s msg_ids=%s",
                len(claim.tasks),
                claim.read_count,
                sub.queue,
                ",".join(str(task.message_id) for task in claim.tasks),
                extra=self.fields,
            )

    def loop_failed(self) -> None:
        self.database_ok = False

    def recovered(self, counts: dict[str, int]) -> None:
        if self.metrics is not None:
            for outcome, count in counts.items():
                self.metrics.child(self.metrics.recoveries, outcome).inc(count)

    def paused(self, reason: str, queue: str = "") -> None:
        if self.metrics is not None:
            self.metrics.child(self.metrics.pauses, queue or self.queue, reason).inc()

    def released(self, count: int) -> None:
        if self.metrics is not None and count:
            self.metrics.child(self.metrics.released, self.queue).inc(count)

    # -- handlers ------------------------------------------------------------------------------------

    def span(self, task: ClaimedTask) -> OpenSpan | None:
        """Before a handler call, with tracing on: the attempt's span, current on this thread until
        the caller closes it (None: the run is not sampled)."""
        parent = self._parent(task.run_id)
        return None if parent is UNSAMPLED else OpenSpan(task, parent)

    def handled(self, task: ClaimedTask, seconds: float) -> None:
        """After a handler call, with metrics on: its duration."""
        metrics = self.metrics
        if metrics is not None:
            metrics.child(
                metrics.task_duration, task.flow_slug, task.step_slug, self._queue_of(task)
            ).observe(seconds)

    @contextmanager
    def handling(self, task: ClaimedTask) -> Iterator[None]:
        """Around one handler call: its span and its duration (an exception propagates unchanged);
        what the runner does inline, for callers off the hot path."""
        span = self.span(task) if self.tracing else None
        started = time.perf_counter()
        try:
            yield
        except BaseException as exc:
            if span is not None:
                span.close(exc)
            raise
        else:
            if span is not None:
                span.close()
        finally:
            self.handled(task, time.perf_counter() - started)

    # -- recorded results ----------------------------------------------------------------------------

    def recorded(
        self, results: Sequence[Result], transitions: Transitions, seconds: float | None = None
    ) -> None:
        """Results the engine recorded (committed): count them, then send the signals they call for.
        Neither may break the caller: a failure here is logged and dropped."""
        metrics = self.metrics
        if metrics is not None:
            if seconds is not None:
                metrics.child(metrics.completion_duration, self.queue).observe(seconds)
            counters = {
                "completed": metrics.completed,
                "retrying": metrics.retried,
                "stale": metrics.stale,
            }
            counts: dict[tuple[Any, str, str, str], int] = {}
            for task, outcome, _ in results:
                counter = counters.get(outcome, metrics.failed if outcome in FAILED_OUTCOMES else None)
                if counter is not None:
                    key = (counter, task.flow_slug, task.step_slug, self._queue_of(task))
                    counts[key] = counts.get(key, 0) + 1
            for (counter, *labels), count in counts.items():
                metrics.child(counter, *labels).inc(count)
        if signals.worker_listening():
            try:
                self._send(results, transitions)
            except Exception:
                logger.exception("could not send pgflow signals for %d recorded result(s)", len(results))

    def _send(self, results: Sequence[Result], transitions: Transitions) -> None:
        """Each signal's sender is the flow's slug, whichever version the task is on."""
        errors: dict[tuple[uuid.UUID, str, int], str | None] = {}
        changed: list[ClaimedTask] = []
        for task, outcome, error in results:
            if outcome == "retrying":
                signals.send(signals.task_retried, version_of(task.flow_slug), **_task_kwargs(task, error))
            elif outcome in FAILED_OUTCOMES:
                signals.send(signals.task_failed, version_of(task.flow_slug), **_task_kwargs(task, error))
                errors[task.key] = error
                changed.append(task)
            elif outcome == "completed":
                changed.append(task)
        if not changed:
            return
        rows = transitions(changed)

        def error_of(row: Transition) -> str | None:
            return errors.get((row.run_id, row.step_slug, row.task_index), row.error_message)

        # several tasks of one batch may have finished the same step or run: one signal for each,
        # steps before runs
        steps: set[tuple[uuid.UUID, str]] = set()
        for row in rows:
            if (row.step_completed or row.step_failed) and (row.run_id, row.step_slug) not in steps:
                steps.add((row.run_id, row.step_slug))
                step = {"run_id": row.run_id, "step_slug": row.step_slug}
                if row.step_completed:
                    signals.send(signals.step_completed, version_of(row.flow_slug), **step)
                else:
                    signals.send(signals.step_failed, version_of(row.flow_slug), **step, error=error_of(row))
        runs: set[uuid.UUID] = set()
        for row in rows:
            if (row.run_completed or row.run_failed) and row.run_id not in runs:
                runs.add(row.run_id)
                if row.run_completed:
                    signals.send(signals.run_completed, version_of(row.flow_slug), run_id=row.run_id)
                else:
                    signals.send(
                        signals.run_failed,
                        version_of(row.flow_slug),
                        run_id=row.run_id,
                        step_slug=row.step_slug,
                        error=error_of(row),
                    )


def _task_kwargs(task: ClaimedTask, error: str | None) -> dict[str, Any]:
    return {
        "run_id": task.run_id,
        "step_slug": task.step_slug,
        "task_index": task.task_index,
        "attempt": task.attempt,
        "error": error,
    }


NO_OBSERVER: Final = Observer()
"""What a runner or completer built outside a worker (the testing toolkit, unit tests) reports to."""
