"""``--max-tasks N``: how many more tasks the process may claim, shared by all its queues' loops.

A loop reserves slots before it reads, so no message is read (and hidden) that the worker may not
run; what the claim did not use is given back. The process stops once N tasks were claimed, and its
graceful stop lets every one of them finish: none is left half-done or claimed twice.
"""

from __future__ import annotations

import threading


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

    @property
    def spent(self) -> bool:
        with self._lock:
            return self.limit is not None and self._claimed >= self.limit

    @property
    def claimed(self) -> int:
        with self._lock:
            return self._claimed
