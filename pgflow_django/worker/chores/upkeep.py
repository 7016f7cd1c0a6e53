"""History upkeep: create the partitions a partitioned history (runs, tasks and queue archives) needs
ahead of time, so no insert ever waits for one (nothing to do on a plain install)."""

from __future__ import annotations

import logging

import psycopg

from pgflow_django.worker.chores import Chore
from pgflow_django.worker.connection import Engine
from pgflow_django.worker.observe import Observer

logger = logging.getLogger("pgflow_django.worker")


class HistoryUpkeep(Chore):
    name = "history partitions"

    def __init__(self, observe: Observer, period: float) -> None:
        super().__init__(period)
        self.observe = observe

    def run(self, engine: Engine) -> bool:
        try:
            created = engine.create_history_partitions()
        except psycopg.errors.LockNotAvailable:
            self.busy(self.observe.fields)
            return True
        if created:
            logger.info(
                "history partitions: created %d interval(s) ahead", created, extra=self.observe.fields
            )
        return True
