"""The handler threads: up to ``size`` threads taking claimed tasks from one queue.

A bare queue instead of ``concurrent.futures``: a worker never waits on a task's future (results go to
the completer), and a Future with its Condition per task was a large share of the Python cost of a
short task. Threads start only when every running one is busy, so a worker whose handlers are quick
keeps a few threads, and with them few Django connections.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

logger = logging.getLogger("pgflow_django.worker")

T = TypeVar("T")


class PoolClosed(RuntimeError):
    """The pool was shut down: nothing more is accepted."""


class HandlerPool(Generic[T]):
    def __init__(
        self,
        size: int,
        run: Callable[[T], None],
        name_prefix: str = "pgflow-handler",
        on_exit: Callable[[], None] | None = None,
    ) -> None:
        self.size = size
        self._run = run
        self._on_exit = on_exit
        """Called by each thread as it leaves (the runner closes the thread's Django connection)."""
        self._name_prefix = name_prefix
        self._items: queue.SimpleQueue[T | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._idle = 0
        self._closed = False

    @property
    def thread_count(self) -> int:
        return len(self._threads)

    def submit(self, item: T) -> None:
        with self._lock:
            if self._closed:
                raise PoolClosed("the handler pool is shut down")
            if self._idle == 0 and len(self._threads) < self.size:
                thread = threading.Thread(
                    target=self._work, name=f"{self._name_prefix}_{len(self._threads)}", daemon=True
                )
                thread.start()
                self._threads.append(thread)
            else:
                self._idle -= 1
        self._items.put(item)

    def shutdown(self) -> list[T]:
        """Accept nothing more and return the items no thread has started; running handlers are left
        to finish (or be abandoned with the process)."""
        with self._lock:
            self._closed = True
            threads = len(self._threads)
        pending: list[T] = []
        while True:
            try:
                item = self._items.get_nowait()
            except queue.Empty:
                break
            if item is not None:
                pending.append(item)
        for _ in range(threads):
            self._items.put(None)
        return pending

    def _work(self) -> None:
        while True:
            item = self._items.get()
            if item is None:
                if self._on_exit is not None:
                    self._on_exit()
                return
            try:
                self._run(item)
            except BaseException:
                # even SystemExit or a CancelledError out of a handler must not cost the pool a thread
                logger.exception("handler thread error")
            finally:
                with self._lock:
                    self._idle += 1
