"""``manage.py pgflow_run_now``: run the waiting work of delayed runs now, through the same call as the
admin's Run now action (``pgflow_django.run_now``)."""

from __future__ import annotations

import uuid
from typing import Any

from django.db import connections

from pgflow_django.db import queries as db_queries
from pgflow_django.db.query import fetch_all
from pgflow_django.management import queries
from pgflow_django.management.run_actions import ChosenRun, RunActionCommand
from pgflow_django.runs.client import RunNowRefused, run_now


class Command(RunActionCommand):
    help = (
        "Run the waiting work of started runs now: the tasks whose messages are hidden until later (a\n"
        "delayed start: start_flow(delay=...) or a Django task's run_after; a step's start_delay; a\n"
        "retry's back-off) become visible at once, workers are woken, and the runs' later steps are not\n"
        "delayed either. Tasks a worker holds, tasks a concurrency or rate limit deferred, and event,\n"
        "sleep and subflow steps are left as they are. Give run ids, or --flow F (every version of it)\n"
        "for its runs with such waiting work; those are shown and counted first, and a terminal asks\n"
        "before any changes, anything else needs --yes. Each run is changed on its own, as the admin's\n"
        "Run now action does it."
    )
    examples = """
  manage.py pgflow_run_now 0b4e6c1e-8f5a-4d2b-9a57-3c1f2e8d9a10
  manage.py pgflow_run_now RUN_ID RUN_ID                several runs
  manage.py pgflow_run_now RUN_ID --dry-run             what it would do
  manage.py pgflow_run_now --flow reminders             asks first
  manage.py pgflow_run_now --flow reminders --yes       no question
  manage.py pgflow_run_now --flow reminders --dry-run   show, change nothing

exit codes: 0 every run done (a run with nothing waiting too); 1 a run not found or finished, not
confirmed, or another error; 2 bad arguments
"""
    verb = "run now"
    plan = "to run now"
    question = "Run the waiting work of these {count} run(s) now?"
    chosen = "run(s) with waiting work"
    at_header = "WAITS UNTIL"
    refused = RunNowRefused

    def choose(self, flows: list[str], options: dict[str, Any]) -> list[ChosenRun]:
        with connections[self.using].cursor() as cursor:
            tables = [
                (row.queue_name, row.table)
                for row in fetch_all(cursor, db_queries.FLOW_QUEUE_TABLES, {"flows": flows})
            ]
            if not tables:
                return []
            rows = fetch_all(cursor, queries.waiting_runs(tables), {"flows": flows})
        return [ChosenRun(row.run_id, row.flow_slug, row.at) for row in rows]

    def call(self, run_id: uuid.UUID) -> int:
        return run_now(run_id, using=self.using)

    def said(self, run_id: uuid.UUID, count: int, *, dry_run: bool) -> str:
        if count == 0:
            return f"run {run_id}: nothing {'is' if dry_run else 'was'} waiting"
        if dry_run:
            return f"run {run_id}: {count} message(s) would become visible now"
        return f"run {run_id}: {count} message(s) visible now"
