"""The worker's chores: the work it does on timers of its own beside claiming.

Each chore is one service with its own period, run by the claim loop between claims on the loop's
own connection (so a worker holds no extra connection for them): the heartbeat with the pause and
cancel notices it brings back, stalled-task recovery, history and archive upkeep, the scheduler
pass. The loop only asks which chores are due and when the next one is.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from pgflow_django.worker.connection import Engine

logger = logging.getLogger("pgflow_django.worker")


class Chore:
    """A service the claim loop runs every ``period`` seconds, the first time ``first_in`` from now."""

    name = "chore"

    def __init__(self, period: float, first_in: float = 0.0) -> None:
        self.period = period
        self.next_at = time.monotonic() + first_in

    def run(self, engine: Engine) -> bool:
        """Do the chore once; False when the worker must stop. An exception is the loop's to retry."""
        raise NotImplementedError

    def busy(self, fields: dict[str, Any]) -> None:
        """The chore met its lock timeout: other work holds the rows it needs; the next pass retries."""
        logger.info(
            "%s: the rows it needs are busy; trying again in %.0fs", self.name, self.period, extra=fields
        )


def run_due(chores: list[Chore], engine: Engine, now: float) -> bool:
    """Run every chore that is due; False as soon as one says the worker must stop."""
    for chore in chores:
        if now >= chore.next_at:
            keep_going = chore.run(engine)
            chore.next_at = now + chore.period
            if not keep_going:
                return False
    return True


def next_due(chores: list[Chore]) -> float:
    """When the next chore is due (monotonic seconds; infinity without chores)."""
    return min((chore.next_at for chore in chores), default=float("inf"))
