"""The worker's event loop: one asyncio loop on one thread, running ``async def`` handlers side by
side (``--async-concurrency`` of them at most, counted by ``WorkerState``), so a hundred handlers
waiting on the network need one thread and not a hundred.

Nothing waits here for a slot: the claim loop claims a task for the event loop only when one of its
slots is free, so every task submitted starts at once.
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


class HandlerLoop(Generic[T]):
    def __init__(self, run: Callable[[T], Coroutine[Any, Any, None]], name: str = "pgflow-async") -> None:
        self._run = run
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._running: set[asyncio.Task[None]] = set()
        """Strong references: the loop keeps only weak ones to its tasks."""
        self._closed = False
        self._lock = threading.Lock()

    def start(self) -> None:
        self._thread.start()

    @property
    def running(self) -> int:
        """Handlers started and not yet finished."""
        return len(self._running)

    def submit(self, item: T) -> None:
        with self._lock:
            if self._closed:
                raise PoolClosed("the worker's event loop is shut down")
            self._loop.call_soon_threadsafe(self._begin, item)

    def shutdown(self) -> None:
        """Accept nothing more; handlers still running are left to finish (or be abandoned with the
        process, as the handler threads are)."""
        with self._lock:
            self._closed = True

    def close_connections(self, close: Callable[[], None], timeout: float) -> None:
        """Run ``close`` on the thread where the handlers' ORM calls ran (``sync_to_async``'s), so
        its Django connection closes with the worker; skipped while a handler still runs."""
        from asgiref.sync import sync_to_async

        if self._running or not self._thread.is_alive():
            return
        done = asyncio.run_coroutine_threadsafe(sync_to_async(close)(), self._loop)
        try:
            done.result(timeout)
        except Exception:
            logger.warning("could not close the event loop's database connection", exc_info=True)

    def _begin(self, item: T) -> None:
        task = self._loop.create_task(self._run(item))
        self._running.add(task)
        task.add_done_callback(self._running.discard)

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_forever()
        except BaseException:
            logger.exception("the worker's event loop stopped")
