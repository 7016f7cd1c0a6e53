"""The limits that end a worker process with exit 0, shared by all its queues' claim loops.

``--max-tasks N``: a loop reserves slots before it reads, so no message is read (and hidden) that the
worker may not run; what the claim did not use is given back. The process stops once N tasks were
claimed, and its graceful stop lets every one of them finish: none is left half-done or claimed twice.

``--until-empty``: the process stops once every loop's last read found nothing while the whole
process held no task and owed no result, with no claim since. A completion can start a step on
another queue of the same process, so one loop finding its queue empty is not enough.
"""

from __future__ import annotations

import threading
from collections.abc import Callable


class TaskBudget:
    def __init__(self, limit: int | None) -> None:
        self.limit = limit
        self._claimed = 0
        self._reserved = 0
        self._lock = threading.Lock()

    def reserve(self, wanted: int) -> int:
        """Up to ``wanted`` slots for the next claim (0 when others hold the rest, or all is spent)."""
        if self.limit is None:
            return wanted
        with self._lock:
            granted = max(0, min(wanted, self.limit - self._claimed - self._reserved))
            self._reserved += granted
            return granted

    def settle(self, reserved: int, claimed: int) -> None:
        """After a claim (or its failure): ``claimed`` of the ``reserved`` slots were used."""
        if self.limit is None:
            return
        with self._lock:
            self._reserved -= reserved
            self._claimed += claimed

    def give_back(self, count: int) -> None:
        """``count`` claimed tasks went back to the queue unrun: they no longer count."""
        if self.limit is None:
            return
        with self._lock:
            self._claimed -= count

    @property
    def spent(self) -> bool:
        with self._lock:
            return self.limit is not None and self._claimed >= self.limit

    @property
    def claimed(self) -> int:
        with self._lock:
            return self._claimed


class UntilEmpty:
    """Decides when ``--until-empty`` is reached, for a process of one or several claim loops."""

    def __init__(self) -> None:
        self._idle_checks: dict[int, Callable[[], bool]] = {}
        self._marks: dict[int, int] = {}
        self._claims = 0
        self._lock = threading.Lock()

    def join(self, loop: object, idle: Callable[[], bool]) -> None:
        """``idle()``: the loop holds no task and every result it was handed is recorded."""
        with self._lock:
            self._idle_checks[id(loop)] = idle
            self._marks.pop(id(loop), None)

    def leave(self, loop: object) -> None:
        """``loop`` no longer reads (its queue paused or gone): the decision goes on without it."""
        with self._lock:
            self._idle_checks.pop(id(loop), None)
            self._marks.pop(id(loop), None)

    def looked(self, loop: object) -> bool:
        """``loop``'s last read found nothing since the last claim anywhere."""
        with self._lock:
            return self._marks.get(id(loop)) == self._claims

    def snapshot(self) -> int | None:
        """Before a read: the claim count if no loop holds or owes work (None: a read proves nothing)."""
        with self._lock:
            if all(idle() for idle in self._idle_checks.values()):
                return self._claims
            return None

    def claimed(self, count: int) -> None:
        if count:
            with self._lock:
                self._claims += count

    def found_nothing(self, loop: object, snapshot: int) -> bool:
        """The read after ``snapshot`` found nothing runnable; True once every loop agrees."""
        with self._lock:
            self._marks[id(loop)] = snapshot
            return len(self._marks) == len(self._idle_checks) and all(
                mark == self._claims for mark in self._marks.values()
            )
