"""Capped exponential back-off with jitter, so workers that lost the database do not reconnect in step."""

from __future__ import annotations

import random


class Backoff:
    def __init__(self, initial: float = 0.1, cap: float = 5.0, factor: float = 2.0) -> None:
        self.initial = initial
        self.cap = cap
        self.factor = factor
        self._next = initial

    def next(self) -> float:
        """The next delay in seconds (+/- 20 %), then grow toward the cap."""
        delay = self._next * random.uniform(0.8, 1.2)
        self._next = min(self._next * self.factor, self.cap)
        return min(delay, self.cap)

    def reset(self) -> None:
        self._next = self.initial
