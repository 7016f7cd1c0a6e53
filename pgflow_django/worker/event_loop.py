"""The worker's event loop: one asyncio loop on one thread, running ``async def`` handlers side by
side (``--async-concurrency`` of them at most, counted by ``WorkerState``), so a hundred handlers
waiting on the network need one thread and not a hundred.

Nothing waits here for a slot: the claim loop claims a task for the event loop only when one of its
slots is free, so every task submitted starts at once.

A handler that blocks (``time.sleep``, a sync HTTP client, a sync ORM call wrapped wrongly) stalls
every other one, and their deadlines with them: the loop times itself and says so.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Coroutine
from typing import Any, Generic, TypeVar

from pgflow_django.worker.pool import PoolClosed

logger = logging.getLogger("pgflow_django.worker")

T = TypeVar("T")

LAG_CHECK_SECONDS = 0.5
"""How often the loop checks that it is not blocked."""
LAG_WARNING_SECONDS = 0.5
"""A check this late means a handler blocked the loop: a warning names the steps running."""
TIDY_SECONDS = 1.0
"""How often, while handlers run, the thread of their ORM calls drops a broken or expired connection."""


class HandlerLoop(Generic[T]):
    def __init__(
        self,
        run: Callable[[T], Coroutine[Any, Any, None]],
        describe: Callable[[T], str],
        *,
        abandon: Callable[[T], None],
        tidy: Callable[[], None],
        died: Callable[[], None],
        name: str = "pgflow-async",
    ) -> None:
        self._run = run
        self._describe = describe
        self._abandon = abandon
        """Called for an item whose coroutine was cancelled before it began (it could not clean up)."""
        self._tidy = tidy
        """Run on the ORM calls' thread (``sync_to_async``'s) every ``TIDY_SECONDS`` while handlers run."""
        self._died = died
        """Called when the loop stops on its own (an exception escaped it): the worker must stop."""
        self._items: dict[asyncio.Task[None], T] = {}
        """The running handlers' tasks (also the strong references the loop does not keep)."""
        self._finished: set[str] = set()
        """The steps whose handlers finished since the last lag check (one may be the blocker)."""
        self._ran_since_tidy = False
        self._tidying: asyncio.Task[None] | None = None
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._closed = False
        self._stopped = False
        self.abandoned = False
        """Handlers, or ORM calls of theirs, may still run on threads that cannot be joined."""
        self._lock = threading.Lock()

    def start(self) -> None:
        self._thread.start()

    @property
    def running(self) -> int:
        """Handlers started and not yet finished."""
        return len(self._items)

    def submit(self, item: T) -> None:
        with self._lock:
            if self._closed:
                raise PoolClosed("the worker's event loop is shut down")
            self._loop.call_soon_threadsafe(self._begin, item)

    def cancel(self, chosen: Callable[[T], bool]) -> None:
        """Cancel the running handlers of the ``chosen`` items at their next await (their run was
        cancelled: nothing they return would be recorded)."""
        with self._lock:
            if not self._stopped:
                self._loop.call_soon_threadsafe(self._cancel, chosen)

    def shutdown(self) -> None:
        """Accept nothing more; handlers still running are left to finish (``stop`` ends them)."""
        with self._lock:
            self._closed = True

    def stop(self, close: Callable[[], None], timeout: float) -> None:
        """After the drain: cancel the handlers still running (their tasks were given back), run
        ``close`` on the ORM calls' thread so its Django connection closes with the worker, and stop
        the loop. An ORM call that does not return within ``timeout`` leaves the loop ``abandoned``."""
        from asgiref.sync import sync_to_async

        with self._lock:
            self._closed = True
            if self._stopped or not self._thread.is_alive():
                return
            self._stopped = True
        self._loop.call_soon_threadsafe(self._cancel, lambda item: True)
        done = asyncio.run_coroutine_threadsafe(sync_to_async(close)(), self._loop)
        try:
            done.result(timeout)
        except Exception:
            self.abandoned = True
            logger.warning("the async handlers' database calls did not finish: leaving them behind")
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout)
        if self._thread.is_alive():
            self.abandoned = True

    def _begin(self, item: T) -> None:
        task = self._loop.create_task(self._run(item))
        self._items[task] = item
        self._ran_since_tidy = True
        task.add_done_callback(self._end)

    def _end(self, task: asyncio.Task[None]) -> None:
        item = self._items.pop(task)
        self._finished.add(self._describe(item))
        if task.cancelled():
            self._abandon(item)

    def _cancel(self, chosen: Callable[[T], bool]) -> None:
        for task, item in list(self._items.items()):
            if chosen(item):
                task.cancel()

    def _check_lag(self, expected: float) -> None:
        late = self._loop.time() - expected
        if late >= LAG_WARNING_SECONDS:
            steps = sorted(self._finished | {self._describe(item) for item in self._items.values()})
            logger.warning(
                "an async handler blocked the worker's event loop for %.1fs, holding up every other "
                "one (steps on the loop meanwhile: %s): await instead, or call blocking code through "
                "sync_to_async",
                late,
                ", ".join(steps),
            )
        self._finished.clear()
        self._loop.call_at(
            self._loop.time() + LAG_CHECK_SECONDS, self._check_lag, self._loop.time() + LAG_CHECK_SECONDS
        )

    def _tidy_connections(self) -> None:
        """Not before each handler: that hop would queue its start behind every other handler's ORM
        calls (they share one thread), holding a claimed task that nothing runs."""
        from asgiref.sync import sync_to_async

        if self._ran_since_tidy and (self._tidying is None or self._tidying.done()):
            self._ran_since_tidy = False
            self._tidying = self._loop.create_task(sync_to_async(self._tidy)())
        self._loop.call_later(TIDY_SECONDS, self._tidy_connections)

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.call_soon(self._check_lag, self._loop.time())
        self._loop.call_later(TIDY_SECONDS, self._tidy_connections)
        try:
            self._loop.run_forever()
        except BaseException:
            logger.exception("the worker's event loop stopped")
        with self._lock:
            self._closed = True
            deliberate = self._stopped
            self._stopped = True
        if not deliberate:
            logger.error("the worker's event loop stopped: stopping the worker")
            self._died()
