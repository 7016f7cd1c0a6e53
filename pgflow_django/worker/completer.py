"""Record handler results in batches: many completions per ``pgflow.complete_tasks`` call, so commit cost
is shared. A batch closes when it is full, when ``flush_ms`` has passed, or at once when no task the
worker holds still owes a result (an idle worker adds no latency; a claimed batch of short tasks is
completed in one call rather than whenever all threads happen to be between tasks). A batch that
raises is retried item by item, so one bad item never undoes the others.

With a hand-off target (the claim loop), each batch also offers the worker's free slots: the
completion claims the tasks it made ready on this worker's queue in the same transaction
(``pgflow.complete_and_hand_off``), and they run like claimed ones without a read.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, TypeVar

from pgflow_django.db.connect import first_line
from pgflow_django.worker.backoff import Backoff
from pgflow_django.worker.connection import ClaimedTask, Engine, HandOffScope, completion_item
from pgflow_django.worker.observe import NO_OBSERVER, Observer, Result
from pgflow_django.worker.queries import TaskOutcome
from pgflow_django.worker.slots import WorkerState

logger = logging.getLogger("pgflow_django.worker")

T = TypeVar("T")

COLLECT_SLICE = 0.0005
"""While handlers run, the completer looks for more results this often until its flush window ends."""


@dataclass(frozen=True)
class Completion:
    task: ClaimedTask
    output_json: str


@dataclass(frozen=True)
class Failure:
    task: ClaimedTask
    error_message: str
    retry_delay: int | None = None
    permanent: bool = False
    """No retry can fix it (an input or output the engine cannot handle): the task fails at once."""


class HandOffTarget(Protocol):
    """Who runs the tasks a completion hands over (the claim loop)."""

    def reserve_hand_off(self, tasks: list[ClaimedTask]) -> tuple[int, HandOffScope | None]:
        """Free slots held for the hand-off of the completion of ``tasks`` (0: hand nothing over), and
        what the hand-off may take for them."""
        ...

    def take_hand_off(self, tasks: list[ClaimedTask], reserved: int, seconds: float) -> list[ClaimedTask]:
        """Run ``tasks`` (claimed for the ``reserved`` slots); returns those it could not start."""
        ...


class Abandoned(Exception):
    """The worker gave up waiting for the database while shutting down."""


class Completer(threading.Thread):
    def __init__(
        self,
        engine: Engine,
        state: WorkerState,
        batch_size: int,
        flush_ms: float,
        hand_off: HandOffTarget | None = None,
    ) -> None:
        super().__init__(name="pgflow-completer", daemon=True)
        self.engine = engine
        self.hand_off = hand_off
        self.state = state
        self.batch_size = batch_size
        self.flush_seconds = flush_ms / 1000.0
        self._queue: queue.SimpleQueue[Completion | Failure] = queue.SimpleQueue()
        self._stop_event = threading.Event()
        self._unrecorded = 0
        self._count_lock = threading.Lock()
        self.observe: Observer = NO_OBSERVER
        """Told of every recorded result (metrics, signals); the worker sets its own."""

    # -- called from handler threads -----------------------------------------------------------

    def complete(self, task: ClaimedTask, output_json: str) -> None:
        # no longer awaited before it is queued: a completer that takes it at once then sees nothing
        # left to wait for and sends it, where the other order made it wait a collect slice first
        self._handed(1)
        self.state.result_ready(task)
        self._queue.put(Completion(task, output_json))

    def fail(
        self,
        task: ClaimedTask,
        error_message: str,
        retry_delay: int | None = None,
        *,
        permanent: bool = False,
    ) -> None:
        self._handed(1)
        self.state.result_ready(task)
        self._queue.put(Failure(task, error_message, retry_delay, permanent))

    def _handed(self, count: int) -> None:
        with self._count_lock:
            self._unrecorded += count

    @property
    def unrecorded(self) -> int:
        """Results handed over and not yet written (queued, or in the batch being flushed): until they
        are, the next steps they start have no messages yet (``--until-empty`` waits for them)."""
        with self._count_lock:
            return self._unrecorded

    def stop(self) -> None:
        """Finish what is queued, then exit."""
        self._stop_event.set()

    @property
    def pending(self) -> int:
        return self._queue.qsize()

    # -- completer thread ---------------------------------------------------------------------

    def run(self) -> None:
        while True:
            try:
                first = self._queue.get(timeout=0.1)
            except queue.Empty:
                if self._stop_event.is_set() or self.state.aborted.is_set():
                    break
                continue
            batch = self._collect(first)
            try:
                self.flush(batch)
            except Abandoned:
                logger.warning(
                    "shutdown: %d task result(s) not recorded; recovery will run them again", len(batch)
                )
            except Exception:
                logger.exception(
                    "could not record %d task result(s); recovery will run them again", len(batch)
                )
            finally:
                self._handed(-len(batch))
        self.engine.close()

    def _collect(self, first: Completion | Failure) -> list[Completion | Failure]:
        """Results arriving within the flush window, checked every ``COLLECT_SLICE`` seconds: waking
        on each queued result would cost a thread switch per task."""
        batch = [first]
        deadline = time.monotonic() + self.flush_seconds
        while len(batch) < self.batch_size:
            try:
                batch.append(self._queue.get_nowait())
                continue
            except queue.Empty:
                pass
            remaining = deadline - time.monotonic()
            if remaining <= 0 or self.state.awaiting_results == 0 or self._stop_event.is_set():
                break
            time.sleep(min(remaining, COLLECT_SLICE))
        return batch

    def flush(self, batch: list[Completion | Failure]) -> None:
        completions = [item for item in batch if isinstance(item, Completion)]
        if completions:
            self._complete_batch(completions)
        for item in batch:
            if isinstance(item, Failure):
                self._fail(item)

    def _retrying(self, call: Callable[[], T]) -> T:
        """Run ``call``, retrying transient database errors with back-off until it works or we abort."""
        backoff = Backoff()
        while True:
            try:
                return call()
            except Exception as exc:
                if not self.engine.recover(exc):
                    raise
                if self.state.aborted.is_set():
                    raise Abandoned() from exc
                delay = backoff.next()
                logger.warning("recording results failed (%s); retrying in %.1fs", first_line(exc), delay)
                if self.state.aborted.wait(delay):
                    raise Abandoned() from exc

    def _complete_batch(self, items: list[Completion]) -> None:
        if self.hand_off is None and len(items) == 1:
            self._complete_one(items[0])
            return
        payload = "[" + ",".join(completion_item(item.task, item.output_json) for item in items) + "]"
        started = time.perf_counter()
        try:
            rows = self._retrying(lambda: self._complete(payload, [item.task for item in items]))
        except Abandoned:
            raise
        except Exception as exc:
            logger.warning(
                "batched completion of %d tasks failed (%s); completing them one by one",
                len(items),
                first_line(exc),
            )
            for item in items:
                self._complete_one(item)
            return
        seconds = time.perf_counter() - started
        by_key = {item.task.key: item for item in items}
        results: list[Result] = []
        for run_id, step_slug, task_index, outcome in rows:
            done = by_key.pop((run_id, step_slug, task_index), None)
            if done is not None:
                self._log_completion(done.task, outcome)
                results.append((done.task, outcome, None))
        for missing in by_key.values():
            logger.warning(
                "completion of %s returned no outcome",
                missing.task.describe(),
                extra=self.observe.log(missing.task),
            )
        self.observe.recorded(results, self.engine.transitions, seconds)

    def _complete(self, payload: str, completing: list[ClaimedTask]) -> list[TaskOutcome]:
        """One completion statement; with a hand-off target it also claims what it made ready for the
        slots the target reserved, and hands those tasks over before returning."""
        target = self.hand_off
        reserved, scope = (0, None) if target is None else target.reserve_hand_off(completing)
        if target is None or scope is None or reserved == 0:
            return self.engine.complete_tasks(payload)
        started = time.perf_counter()
        rows: list[TaskOutcome] = []
        handed: list[ClaimedTask] = []
        try:
            rows, handed = self.engine.complete_and_hand_off(payload, scope, reserved)
        finally:
            left = target.take_hand_off(handed, reserved, time.perf_counter() - started)
        if left:
            self._give_back(left)
        return rows

    def _give_back(self, tasks: list[ClaimedTask]) -> None:
        """Handed-off tasks the worker can no longer start (it is stopping): queued again at once."""
        try:
            released = self._retrying(lambda: self.engine.release(tasks))
        except Exception as exc:
            logger.warning(
                "could not give back %d handed-off task(s) (%s); recovery will run them again",
                len(tasks),
                first_line(exc),
            )
            return
        logger.info("gave back %d handed-off task(s) the stopping worker will not run", released)

    def _complete_one(self, item: Completion) -> None:
        started = time.perf_counter()
        try:
            outcome = self._retrying(lambda: self.engine.complete_task(item.task, item.output_json))
        except Abandoned:
            raise
        except Exception as exc:
            message = f"could not record the task's output: {first_line(exc)}"
            logger.error("%s %s", message, item.task.describe(), extra=self.observe.log(item.task))
            self._fail(Failure(item.task, message, permanent=True))
            return
        self._log_completion(item.task, outcome)
        self.observe.recorded(
            [(item.task, outcome, None)], self.engine.transitions, time.perf_counter() - started
        )

    def _fail(self, item: Failure) -> None:
        def record() -> str:
            if item.permanent:
                return self.engine.reject_task(item.task, item.error_message)
            return self.engine.fail_task(item.task, item.error_message, item.retry_delay)

        try:
            outcome = self._retrying(record)
        except Abandoned:
            raise
        except Exception as exc:
            logger.error(
                "could not record the failure of %s (%s); recovery will run it again",
                item.task.describe(),
                first_line(exc),
                extra=self.observe.log(item.task),
            )
            return
        extra = self.observe.log(item.task)
        if outcome == "retrying":
            logger.info("task will be retried %s", item.task.describe(), extra=extra)
            # A retry delays an existing message, which notifies no one: wake the loop so its next
            # read learns when the message becomes visible and schedules a timed read.
            self.state.notify_messages(item.task.queue or item.task.flow_slug.lower())
        elif outcome == "stale":
            logger.info(
                "late failure ignored (the claim is no longer current) %s", item.task.describe(), extra=extra
            )
        else:
            logger.warning("task attempts exhausted (%s) %s", outcome, item.task.describe(), extra=extra)
        self.observe.recorded([(item.task, outcome, item.error_message)], self.engine.transitions)

    def _log_completion(self, task: ClaimedTask, outcome: str) -> None:
        if outcome == "completed":
            if logger.isEnabledFor(logging.DEBUG):
                logger.debug("task completed %s", task.describe(), extra=self.observe.log(task))
        elif outcome == "stale":
            logger.info(
                "late completion ignored (the claim is no longer current) %s",
                task.describe(),
                extra=self.observe.log(task),
            )
        else:
            logger.warning(
                "completion %s: the output cannot feed the next step %s",
                outcome,
                task.describe(),
                extra=self.observe.log(task),
            )
