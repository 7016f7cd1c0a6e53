"""Run one claimed task's handler and hand its result on: on a pool thread, or, for an ``async def``
handler, on the worker's event loop (``--async-concurrency``).

Plain handlers queue their result for the batched completer and free their slot at once. ``atomic=True``
handlers complete inside their own ``transaction.atomic()`` on Django's connection, so their database
writes commit together with the completion, or roll back when the claim turned out to be stale; an
atomic ``async def`` handler therefore runs on a pool thread, whose connection holds that transaction.

Every handler gets its deadline (``ctx.deadline``, the step's timeout from the handler's start); an
async handler still running then is cancelled at its next await and its attempt fails as a timeout.
"""

from __future__ import annotations

import asyncio
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

from pgflow_django.db.connect import first_line
from pgflow_django.db.query import fetch_all, fetch_value
from pgflow_django.flows.context import Deadline, TaskContext, TaskTimeout
from pgflow_django.flows.dsl import Flow, Retry, StepDefinition
from pgflow_django.runs.encoding import OutputNotSerialisable, encode_output
from pgflow_django.runs.recorded_errors import error_text
from pgflow_django.worker import queries
from pgflow_django.worker.completer import Completer
from pgflow_django.worker.connection import ClaimedTask, completion_args, transition_args
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


def runs_on_event_loop(step: StepDefinition) -> bool:
    """Whether a worker with async slots runs this step's handler on its event loop: an ``async def``
    handler that is not atomic (an atomic one needs a thread's connection for its transaction)."""
    return inspect.iscoroutinefunction(step.handler) and not step.atomic


async def _within_deadline(awaitable: Awaitable[Any], deadline: Deadline, step_slug: str) -> Any:
    """Await the handler until its deadline; past it, the handler is cancelled at its next await and
    the attempt fails with ``TaskTimeout`` (the handler's own ``TimeoutError`` stays its own)."""
    limit = asyncio.timeout(deadline.remaining())
    try:
        async with limit:
            return await awaitable
    except BaseException:
        if limit.expired():  # whatever the handler made of its cancellation
            raise TaskTimeout(step_slug, deadline.timeout) from None
        raise


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
        self._timeouts = {
            (flow.slug, slug): flow.effective_options(slug).timeout or 60
            for flow in self.flows.values()
            for slug in flow.steps
        }
        self.observe: Observer = NO_OBSERVER
        """Times each handler and hears of atomic handlers' completions; the worker sets its own."""

    def run(self, task: ClaimedTask) -> None:
        """Pool-thread entry point: whatever happens, the task's slot is given back."""
        started = time.perf_counter()
        try:
            step = self._runnable(task)
            if step is None:
                pass
            elif step.atomic:
                self._run_atomic(task, step)
            else:
                self._run_plain(task, step)
        except Exception:
            logger.exception("worker error while running %s", task.describe(), extra=self.observe.log(task))
        finally:
            self.state.release(task, time.perf_counter() - started)

    async def run_on_loop(self, task: ClaimedTask) -> None:
        """Event-loop entry point of a step that ``runs_on_event_loop``: as ``run``, awaiting the handler
        beside the others; its Django ORM calls go through ``sync_to_async``, as Django's async rules
        ask, onto one shared thread (and one connection). A run's cancel cancels it at its next await."""
        started = time.perf_counter()
        try:
            step = self._runnable(task)
            if step is None or self._withdrawn(task, "before it started"):
                pass
            else:
                try:
                    output_json = await self._acall(task, step)
                except asyncio.CancelledError as exc:
                    if not self._withdrawn(task, "at an await"):
                        self._fail(task, exc)  # the handler's own
                except BaseException as exc:  # the handler's own, whatever its class (see _fail)
                    self._fail(task, exc)
                else:
                    self.completer.complete(task, output_json)
        except Exception:
            logger.exception("worker error while running %s", task.describe(), extra=self.observe.log(task))
        finally:
            self.state.release(task, time.perf_counter() - started)

    def _withdrawn(self, task: ClaimedTask, when: str) -> bool:
        """Whether the worker withdrew the task (its run was cancelled, or the worker's drain is over
        and the task was given back): nothing is recorded for it then."""
        if self.state.cancellation(task).is_set():
            why = "its run was cancelled"
        elif self.state.aborted.is_set():
            why = "the worker stopped"
        else:
            return False
        logger.info("handler cancelled %s: %s %s", when, why, task.describe(), extra=self.observe.log(task))
        return True

    def abandon(self, task: ClaimedTask) -> None:
        """A handler's coroutine was cancelled before it began: give its slot back for it."""
        self.state.release(task)

    def _runnable(self, task: ClaimedTask) -> StepDefinition | None:
        """The task's step, or None once its attempt is failed here: a step this worker does not
        define, or an input that could not be decoded (it fails alone, without a retry)."""
        flow = self.flows.get(task.flow_slug)
        step = None if flow is None else flow.steps.get(task.step_slug)
        if step is None:
            self.completer.fail(
                task, f"step {task.step_slug!r} of flow {task.flow_slug!r} is not defined in this worker"
            )
            return None
        if task.input_error is not None:
            logger.error("%s %s", task.input_error, task.describe(), extra=self.observe.log(task))
            self.completer.fail(task, task.input_error, permanent=True)
            return None
        return step

    def thread_done(self) -> None:
        """A handler thread leaves (the worker stopped): its Django connection closes with it rather
        than wait for the process to exit."""
        connections.close_all()

    def tidy(self) -> None:
        """On the thread of the async handlers' ORM calls, now and then: drop a broken or expired
        Django connection there, as ``_fresh_connections`` does around each threaded handler."""
        self._fresh_connections()

    def _fresh_connections(self) -> None:
        """Around each handler a worker thread drops a broken or expired Django connection; an
        in-process runner (``pgflow_django.testing``) keeps the caller's connection and transaction."""
        close_old_connections()

    def _deadline(self, task: ClaimedTask, step: StepDefinition) -> Deadline:
        return Deadline.after(self._timeouts.get((task.flow_slug, step.slug), 60))

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
            deadline=self._deadline(task, step),
            **extra,
        )

    def _call(self, task: ClaimedTask, step: StepDefinition) -> str:
        """Run the handler (sync, or async on its own event loop) and return its encoded output."""
        from asgiref.sync import async_to_sync

        # a context only for the handlers that take one: this is every task's path
        ctx = self._context(task, step) if step.accepts_context else None
        args: tuple[Any, ...] = (task.input,) if ctx is None else (task.input, ctx)
        observe = self.observe
        # inline, not a context manager: this is every task's path (see Observer.handling)
        span = observe.span(task) if observe.tracing else None
        self.state.started()
        started = time.perf_counter()
        try:
            output = step.handler(*args)
            if self._async.get((task.flow_slug, step.slug)) or inspect.isawaitable(output):
                deadline = self._deadline(task, step) if ctx is None else ctx.deadline
                output = async_to_sync(_within_deadline)(output, deadline, step.slug)
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

    async def _acall(self, task: ClaimedTask, step: StepDefinition) -> str:
        """``_call`` on the event loop: the handler is awaited there, within its deadline."""
        ctx = self._context(task, step) if step.accepts_context else None
        args: tuple[Any, ...] = (task.input,) if ctx is None else (task.input, ctx)
        deadline = self._deadline(task, step) if ctx is None else ctx.deadline
        self.state.started()
        try:
            with self.observe.handling(task):
                output = await _within_deadline(step.handler(*args), deadline, step.slug)
        finally:
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
