"""Run one claimed task's handler on a pool thread and hand its result on.

Plain handlers queue their result for the batched completer and free their slot at once. ``atomic=True``
handlers complete inside their own ``transaction.atomic()`` on Django's connection, so their database
writes commit together with the completion, or roll back when the claim turned out to be stale.
"""

from __future__ import annotations

import inspect
import logging
import time
from collections.abc import Awaitable, Sequence
from typing import Any

from django.db import (
    DataError,
    InterfaceError,
    OperationalError,
    close_old_connections,
    connections,
    transaction,
)

from pgflow_django.db.query import fetch_all, fetch_value
from pgflow_django.flows.context import TaskContext
from pgflow_django.flows.dsl import Flow, Retry, StepDefinition
from pgflow_django.runs.encoding import OutputNotSerialisable, encode_output
from pgflow_django.runs.recorded_errors import error_text
from pgflow_django.worker import queries
from pgflow_django.worker.completer import Completer
from pgflow_django.worker.connection import ClaimedTask, completion_args, first_line, transition_args
from pgflow_django.worker.logs import EXPECTED_FAILURE
from pgflow_django.worker.observe import NO_OBSERVER, Observer
from pgflow_django.worker.slots import WorkerState

logger = logging.getLogger("pgflow_django.worker")


class OutputNotStorable(ValueError):
    """PostgreSQL refused the encoded output: the handler did nothing wrong, so this is recorded as
    one line, like the completer does for plain handlers, and not retried."""


class _Discard(Exception):
    """Leaves an atomic block so the handler's writes roll back, carrying the completion outcome."""

    def __init__(self, outcome: str) -> None:
        super().__init__(outcome)
        self.outcome = outcome


def _traceback(exc: BaseException) -> BaseException | None:
    """A failed attempt carries its exception, so error trackers and logging integrations capture it
    with the record's ``pgflow_*`` fields; never for a lost database connection (the worker's own
    stderr shows the traceback at debug level only: ``logs.WorkerFormatter``)."""
    if isinstance(exc, OperationalError | InterfaceError):
        return None
    return exc


async def _await(awaitable: Awaitable[Any]) -> Any:
    return await awaitable


class Runner:
    """Dispatches each claimed task to its handler, chosen by the task's own (flow, step) identity."""

    def __init__(
        self, flows: Flow | list[Flow], state: WorkerState, completer: Completer, using: str = "default"
    ) -> None:
        self.flows = {flow.slug: flow for flow in (flows if isinstance(flows, list) else [flows])}
        self.state = state
        self.completer = completer
        self.using = using
        self._async = {
            (flow.slug, slug): inspect.iscoroutinefunction(step.handler)
            for flow in self.flows.values()
            for slug, step in flow.steps.items()
        }
        self.observe: Observer = NO_OBSERVER
        """Times each handler and hears of atomic handlers' completions; the worker sets its own."""

    def run(self, task: ClaimedTask) -> None:
        """Pool-thread entry point: whatever happens, the task's slot is given back."""
        started = time.perf_counter()
        try:
            flow = self.flows.get(task.flow_slug)
            step = None if flow is None else flow.steps.get(task.step_slug)
            if step is None:
                self.completer.fail(
                    task, f"step {task.step_slug!r} of flow {task.flow_slug!r} is not defined in this worker"
                )
            elif task.input_error is not None:
                logger.error("%s %s", task.input_error, task.describe(), extra=self.observe.log(task))
                self.completer.fail(task, task.input_error, permanent=True)
            elif step.atomic:
                self._run_atomic(task, step)
            else:
                self._run_plain(task, step)
        except Exception:
            logger.exception("worker error while running %s", task.describe(), extra=self.observe.log(task))
        finally:
            self.state.release(task, time.perf_counter() - started)

    def thread_done(self) -> None:
        """A handler thread leaves (the worker stopped): its Django connection closes with it rather
        than wait for the process to exit."""
        connections.close_all()

    def _fresh_connections(self) -> None:
        """Around each handler a worker thread drops a broken or expired Django connection; an
        in-process runner (``pgflow_django.testing``) keeps the caller's connection and transaction."""
        close_old_connections()

    def _context(self, task: ClaimedTask, step: StepDefinition) -> TaskContext:
        extra: dict[str, Any] = {}
        if step.is_root and not step.is_map:
            extra["flow_input"] = task.input
        return TaskContext(
            flow_slug=task.flow_slug,
            run_id=task.run_id,
            step_slug=task.step_slug,
            task_index=task.task_index,
            attempt=task.attempt,
            queue_name=task.queue or task.flow_slug.lower(),
            message_id=task.message_id,
            shutdown_event=self.state.stopping,
            using=self.using,
            cancel_event=self.state.cancellation(task),
            **extra,
        )

    def _call(self, task: ClaimedTask, step: StepDefinition) -> str:
        """Run the handler (sync, or async on its own event loop) and return its encoded output."""
        from asgiref.sync import async_to_sync

        args: tuple[Any, ...] = (
            (task.input, self._context(task, step)) if step.accepts_context else (task.input,)
        )
        observe = self.observe
        # inline, not a context manager: this is every task's path (see Observer.handling)
        span = observe.span(task) if observe.tracing else None
        self.state.started()
        started = time.perf_counter()
        try:
            if self._async.get((task.flow_slug, step.slug)):
                output = async_to_sync(step.handler)(*args)
            else:
                output = step.handler(*args)
                if inspect.isawaitable(output):
                    output = async_to_sync(_await)(output)
        except BaseException as exc:
            if span is not None:
                span.close(exc)
            raise
        else:
            if span is not None:
                span.close()
        finally:
            if observe.metrics is not None:
                observe.handled(task, time.perf_counter() - started)
            self.state.finished()
        return encode_output(output)

    def _run_plain(self, task: ClaimedTask, step: StepDefinition) -> None:
        self._fresh_connections()
        try:
            output_json = self._call(task, step)
        except BaseException as exc:  # SystemExit, CancelledError...: the handler's, not the worker's
            self._fail(task, exc)
        else:
            self.completer.complete(task, output_json)
        finally:
            self._fresh_connections()

    def _fail(self, task: ClaimedTask, exc: BaseException) -> None:
        """Record a failed attempt: ``Retry`` chooses the delay, an output the engine cannot store
        fails the task at once, any other exception is an error under the retry policy.

        Handlers run on pool threads, which never receive the worker's signals: a ``SystemExit``,
        ``KeyboardInterrupt``, ``CancelledError`` or ``GeneratorExit`` here is the handler's own."""
        extra = self.observe.log(task)
        if isinstance(exc, Retry):
            logger.info("handler asked for a retry in %ss %s", exc.delay, task.describe(), extra=extra)
            self.completer.fail(task, exc.message, exc.delay)
            return
        if isinstance(exc, OutputNotSerialisable):
            logger.error("%s %s", exc, task.describe(), extra=extra)
            self.completer.fail(task, str(exc), permanent=True)
            return
        recorded = error_text(exc)
        expected = {**extra, EXPECTED_FAILURE: True}
        if getattr(exc, "pgflow_error_text", None) is not None:
            # the exception wraps the handler's own (its __cause__): log that one, once, readably
            cause = exc.__cause__ if isinstance(exc.__cause__, BaseException) else exc
            logger.warning(
                "handler failed %s: %s", task.describe(), exc, exc_info=_traceback(cause), extra=expected
            )
        else:
            logger.warning(
                "handler failed %s: %s", task.describe(), recorded, exc_info=_traceback(exc), extra=expected
            )
        self.completer.fail(task, recorded, permanent=getattr(exc, "pgflow_permanent", False) is True)

    def _transitions(self, tasks: Sequence[ClaimedTask]) -> list[queries.Transition]:
        """What an atomic handler's committed completion changed, read on its own Django connection."""
        with connections[self.using].cursor() as cursor:
            return fetch_all(cursor, queries.TRANSITIONS, transition_args(tasks))

    def _run_atomic(self, task: ClaimedTask, step: StepDefinition) -> None:
        self._fresh_connections()
        outcome: str | None = None
        output_json = ""
        try:
            with transaction.atomic(using=self.using):
                output_json = self._call(task, step)
                with connections[self.using].cursor() as cursor:
                    try:
                        with transaction.atomic(using=self.using):
                            recorded = fetch_value(
                                cursor, queries.COMPLETE_TASK, completion_args(task, output_json)
                            )
                    except DataError as exc:
                        raise OutputNotStorable(
                            f"could not record the task's output: {first_line(exc)}"
                        ) from None
                outcome = None if recorded is None else str(recorded)
                if outcome != "completed":
                    raise _Discard(str(outcome))
        except _Discard:
            if outcome == "stale":
                logger.info(
                    "late completion ignored, the handler's writes were rolled back %s",
                    task.describe(),
                    extra=self.observe.log(task),
                )
                self.observe.recorded([(task, "stale", None)], self._transitions)
            else:
                logger.warning(
                    "completion %s, the handler's writes were rolled back %s",
                    outcome,
                    task.describe(),
                    extra=self.observe.log(task),
                )
                self.completer.complete(task, output_json)
        except OutputNotStorable as exc:
            logger.error("%s %s", exc, task.describe(), extra=self.observe.log(task))
            self.completer.fail(task, str(exc), permanent=True)
        except BaseException as exc:  # as in _run_plain: the handler's own, whatever its class
            self._fail(task, exc)
        else:
            if logger.isEnabledFor(logging.DEBUG):
                logger.debug("task completed %s", task.describe(), extra=self.observe.log(task))
            self.observe.recorded([(task, "completed", None)], self._transitions)
        finally:
            self._fresh_connections()
