"""The wait pass: end the due waits of event and sleep steps (``pgflow.wake_waits``), so that a sleep
completes at its time and an event wait at its timeout with no worker holding either meanwhile."""

from __future__ import annotations

import logging
from typing import Final

from pgflow_django.worker.chores import Chore
from pgflow_django.worker.connection import Engine
from pgflow_django.worker.observe import Observer

logger = logging.getLogger("pgflow_django.worker")

WAIT_PASS_SECONDS: Final = 1.0
"""How late a sleep may complete after its time: one cheap index probe a second per worker."""


class WaitPass(Chore):
    name = "wait pass"

    def __init__(self, observe: Observer, period: float = WAIT_PASS_SECONDS) -> None:
        super().__init__(period)
        self.observe = observe

    def run(self, engine: Engine) -> bool:
        counts = engine.wake_waits()
        if any(counts.values()):
            logger.debug(
                "wait pass: %d wait(s) completed, %d failed",
                counts.get("completed", 0),
                counts.get("failed", 0),
                extra=self.observe.fields,
            )
        return True
