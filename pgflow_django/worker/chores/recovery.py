"""Stalled-task recovery: requeue the tasks whose worker stopped answering (one worker at a time,
through ``pgflow.requeue_stalled_tasks``), and read at once what it made visible again."""

from __future__ import annotations

import logging
from typing import Final

import psycopg

from pgflow_django.worker.chores import Chore
from pgflow_django.worker.connection import Engine
from pgflow_django.worker.observe import Observer
from pgflow_django.worker.slots import WorkerState

logger = logging.getLogger("pgflow_django.worker")

RECOVERY_WORDS: Final = {
    "requeued": "task(s) requeued",
    "permanently_stalled": "task(s) failed as permanently stalled",
}
"""How the stalled-recovery log line names each outcome of ``pgflow.requeue_stalled_tasks``."""
RECOVERY_PASS_DONE: Final = "stalled-task recovery pass finished"
"""Logged at debug level after each pass this worker ran, so a test can wait for passes to happen."""


class StalledRecovery(Chore):
    name = "stalled-task recovery"

    def __init__(self, state: WorkerState, observe: Observer, period: float) -> None:
        super().__init__(period)
        self.state = state
        self.observe = observe

    def run(self, engine: Engine) -> bool:
        try:
            rows = engine.requeue_stalled()
        except psycopg.errors.LockNotAvailable:
            self.busy(self.observe.fields)
            return True
        if rows is None:
            logger.debug("stalled-task recovery is running in another worker", extra=self.observe.fields)
            return True
        counts = {row.outcome: int(row.task_count) for row in rows if row.task_count}
        logger.debug("%s (%d task(s) changed)", RECOVERY_PASS_DONE, sum(counts.values()))
        self.observe.recovered(counts)
        if counts:
            logger.warning(
                "stalled-task recovery (tasks whose worker stopped answering): %s",
                ", ".join(
                    f"{count} {RECOVERY_WORDS.get(outcome, outcome)}" for outcome, count in counts.items()
                ),
                extra=self.observe.fields,
            )
        if counts.get("requeued"):
            # Requeued messages became visible without an insert: read now rather than at the next poll.
            self.state.notify_messages()
        return True
