"""The supervisor's last statements at stop: give back what no handler finished, mark the worker
stopped. Each gets a few quick retries; whatever still fails, the stalled-task recovery of the other
workers covers (the tasks' leases run out)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from pgflow_django.db.connect import first_line
from pgflow_django.worker.backoff import Backoff
from pgflow_django.worker.connection import ClaimedTask, Engine, is_transient
from pgflow_django.worker.observe import Observer

logger = logging.getLogger("pgflow_django.worker")


class StopCalls:
    """Statements on the supervisor connection while the worker stops."""

    def __init__(self, engine: Engine, observe: Observer, queue: str) -> None:
        self.engine = engine
        self.observe = observe
        self.queue = queue

    def return_unstarted(self, tasks: list[ClaimedTask]) -> None:
        """Tasks no thread started before the drain ended: back to the queue, attempts returned."""
        self._give_back(tasks, Engine.return_unstarted, "returned", "task(s) no handler started")

    def release(self, tasks: list[ClaimedTask]) -> None:
        """Tasks whose handlers outlived the drain: queued again, their attempts still counted."""
        self._give_back(tasks, Engine.release, "released", "unfinished task(s)")

    def _give_back(
        self, tasks: list[ClaimedTask], give: Callable[[Engine, list[ClaimedTask]], int], done: str, what: str
    ) -> None:
        count = self.bounded(lambda engine: give(engine, tasks), f"give back {what}")
        if count is not None:
            self.observe.released(int(count))
            logger.warning(
                "%s %d of %d %s queue=%s msg_ids=%s",
                done,
                count,
                len(tasks),
                what,
                self.queue,
                ",".join(str(task.message_id) for task in sorted(tasks, key=lambda task: task.message_id)),
                extra=self.observe.fields,
            )

    def bounded(self, call: Any, what: str, attempts: int = 3) -> Any:
        """A few quick retries at shutdown; afterwards heartbeats and recovery cover what was missed."""
        backoff = Backoff(initial=0.2, cap=1.0)
        for attempt in range(attempts):
            try:
                return call(self.engine)
            except Exception as exc:
                self.engine.recover(exc)
                if attempt == attempts - 1 or not is_transient(exc):
                    logger.warning("could not %s: %s", what, first_line(exc), extra=self.observe.fields)
                    return None
                time.sleep(backoff.next())
        return None
