"""The handler threads: up to ``size`` threads taking claimed tasks from one queue.

A bare queue instead of ``concurrent.futures``: a worker never waits on a task's future (results go to
the completer), and a Future with its Condition per task was a large share of the Python cost of a
short task. Threads start only when every running one is busy, so a worker whose handlers are quick
keeps a few threads, and with them few Django connections.

Items waiting for a thread sit in a heap, highest priority first and in submission order within a
priority, so whatever the worker holds runs in the order the claim would have read it. A wake-up
token per submission tells a thread to look; an item the worker withdrew (it waited too long, see
``withdraw``) leaves a token that finds nothing, which costs that thread one more look.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import queue
import threading
import time
from collections.abc import Callable
from typing import Generic, TypeVar

logger = logging.getLogger("pgflow_django.worker")

T = TypeVar("T")

_STOP = False
"""The token that tells a thread to leave (a submission's token is True)."""


class PoolClosed(RuntimeError):
    """The pool was shut down: nothing more is accepted."""


class HandlerPool(Generic[T]):
    def __init__(
        self,
        size: int,
        run: Callable[[T], None],
        name_prefix: str = "pgflow-handler",
        on_exit: Callable[[], None] | None = None,
        priority: Callable[[T], int] | None = None,
    ) -> None:
        self.size = size
        self._run = run
        self._on_exit = on_exit
        """Called by each thread as it leaves (the runner closes the thread's Django connection)."""
        self._priority = priority or (lambda item: 0)
        self._name_prefix = name_prefix
        self._waiting: list[tuple[int, int, float, T]] = []
        """Heap of (-priority, submission number, submitted at, item) not started by a thread."""
        self._order = itertools.count()
        self._tokens: queue.SimpleQueue[bool] = queue.SimpleQueue()
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
            heapq.heappush(self._waiting, (-self._priority(item), next(self._order), time.monotonic(), item))
            if self._idle == 0 and len(self._threads) < self.size:
                thread = threading.Thread(
                    target=self._work, name=f"{self._name_prefix}_{len(self._threads)}", daemon=True
                )
                thread.start()
                self._threads.append(thread)
            else:
                self._idle -= 1
        self._tokens.put(True)

    def oldest_wait(self) -> float | None:
        """When (``time.monotonic()``) the longest-waiting item was submitted; None when none waits."""
        with self._lock:
            return min((entry[2] for entry in self._waiting), default=None)

    def withdraw(self, submitted_before: float) -> list[T]:
        """Take back the items submitted before ``submitted_before`` that no thread has started."""
        with self._lock:
            kept = [entry for entry in self._waiting if entry[2] >= submitted_before]
            if len(kept) == len(self._waiting):
                return []
            taken = [entry[3] for entry in sorted(self._waiting) if entry[2] < submitted_before]
            heapq.heapify(kept)
            self._waiting = kept
        return taken

    def shutdown(self) -> list[T]:
        """Accept nothing more and return the items no thread has started; running handlers are left
        to finish (or be abandoned with the process)."""
        with self._lock:
            self._closed = True
            threads = len(self._threads)
            pending = [entry[3] for entry in sorted(self._waiting)]
            self._waiting = []
        for _ in range(threads):
            self._tokens.put(_STOP)
        return pending

    def _next(self) -> T | None:
        with self._lock:
            return heapq.heappop(self._waiting)[3] if self._waiting else None

    def _work(self) -> None:
        while True:
            if self._tokens.get() is _STOP:
                if self._on_exit is not None:
                    self._on_exit()
                return
            item = self._next()
            try:
                if item is not None:
                    self._run(item)
            except BaseException:
                # even SystemExit or a CancelledError out of a handler must not cost the pool a thread
                logger.exception("handler thread error")
            finally:
                with self._lock:
                    self._idle += 1
