"""The heartbeat: refresh the worker's registration, and act on what it brings back (a deprecation,
pauses of the queues it serves, cancelled runs of the tasks it holds)."""

from __future__ import annotations

import logging
import uuid
from typing import Protocol

from pgflow_django.worker.chores import Chore
from pgflow_django.worker.connection import Engine, WorkerRegistration
from pgflow_django.worker.observe import Observer
from pgflow_django.worker.slots import WorkerState

logger = logging.getLogger("pgflow_django.worker")

EveryPause = tuple[str, str, "str | None", object]
"""(what, reason, detail, subscription) of the first pause, when every queue served is paused."""


class Registered(Protocol):
    """The worker as its heartbeat sees it."""

    worker_id: uuid.UUID
    queue: str
    registration: WorkerRegistration
    state: WorkerState
    observe: Observer

    def check_pauses(self, engine: Engine) -> EveryPause | None: ...

    def tell_cancelled(self, engine: Engine) -> None: ...


class Heartbeat(Chore):
    name = "heartbeat"

    def __init__(self, worker: Registered, period: float) -> None:
        super().__init__(period, first_in=period)  # registering was the first beat
        self.worker = worker

    def run(self, engine: Engine) -> bool:
        worker = self.worker
        if engine.heartbeat(worker.registration):
            logger.warning(
                "worker %s was deprecated: stopping", worker.worker_id, extra=worker.observe.fields
            )
            worker.state.request_stop()
            return False
        every_pause = worker.check_pauses(engine)
        if every_pause is not None:
            what, reason = every_pause[0], every_pause[1]
            logger.warning(
                "%s was paused (%s): stopping queue=%s",
                what,
                reason,
                worker.queue,
                extra=worker.observe.fields,
            )
            worker.observe.paused(str(reason))
            worker.state.request_stop()
            return False
        worker.tell_cancelled(engine)
        return True
