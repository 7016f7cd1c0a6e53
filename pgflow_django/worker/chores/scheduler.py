"""The scheduler pass: fire the due schedules (one worker at a time; see ``pgflow_django.schedules``)."""

from __future__ import annotations

from pgflow_django.schedules.service import PASS_INTERVAL, run_pass
from pgflow_django.worker.chores import Chore
from pgflow_django.worker.connection import Engine


class SchedulerPass(Chore):
    name = "scheduler pass"

    def __init__(self) -> None:
        super().__init__(PASS_INTERVAL)

    def run(self, engine: Engine) -> bool:
        run_pass(engine.conn)
        return True
