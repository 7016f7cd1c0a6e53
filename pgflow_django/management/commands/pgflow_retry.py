"""``manage.py pgflow_retry``: continue failed runs from where they failed, through the same call as the
admin's Retry action (``pgflow_django.retry_run``)."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

from django.core.management.base import CommandParser
from django.db import connections
from django.utils import timezone

from pgflow_django.db.query import fetch_all
from pgflow_django.management import queries
from pgflow_django.management.cli import parse_duration, printable
from pgflow_django.management.layout import local_time
from pgflow_django.management.run_actions import ChosenRun, RunActionCommand
from pgflow_django.runs.client import RetryRefused, retry_run


class Command(RunActionCommand):
    help = (
        "Retry failed runs from where they failed: completed steps keep their outputs, failed and\n"
        "cancelled tasks are queued again (their attempt numbers go on, each with its full attempts\n"
        "again), and dependents follow as usual. Give run ids, or --flow F (every version of it) for its\n"
        "failed runs, with --failed-since D for those that failed in the last D; cancelled runs and child\n"
        "runs (a retry of their parent starts a new child) are left to be retried by id. The runs --flow\n"
        "chooses are shown and counted first; a terminal asks before any is retried, anything else needs\n"
        "--yes. Each run is retried on its own, as the admin's Retry action does it."
    )
    examples = """
  manage.py pgflow_retry 0b4e6c1e-8f5a-4d2b-9a57-3c1f2e8d9a10
  manage.py pgflow_retry RUN_ID RUN_ID                    several runs
  manage.py pgflow_retry RUN_ID --dry-run                 what it would do
  manage.py pgflow_retry --flow process_order --failed-since 1h
  manage.py pgflow_retry --flow process_order --failed-since 1h --yes
  manage.py pgflow_retry --flow process_order --dry-run   show, change nothing

exit codes: 0 every run retried (or none to retry); 1 a run not found or refused (not failed, or
failed outside its tasks), not confirmed, or another error; 2 bad arguments
"""
    verb = "retry"
    plan = "to retry from where they failed"
    question = "Retry these {count} run(s) from where they failed?"
    chosen = "failed run(s)"
    at_header = "FAILED"
    refused = RetryRefused

    def add_filters(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--failed-since",
            type=parse_duration,
            metavar="DURATION",
            help="with --flow: only runs that failed in the last DURATION (e.g. 30m, 1h, 7d)",
        )

    def filters_given(self, options: dict[str, Any]) -> list[str]:
        return [] if options["failed_since"] is None else ["--failed-since"]

    def choose(self, flows: list[str], options: dict[str, Any]) -> list[ChosenRun]:
        with connections[self.using].cursor() as cursor:
            rows = fetch_all(cursor, queries.FAILED_RUNS, {"flows": flows, "within": options["failed_since"]})
        return [ChosenRun(row.run_id, row.flow_slug, row.at) for row in rows]

    def describe_choice(self, name: str, options: dict[str, Any]) -> str:
        within: timedelta | None = options["failed_since"]
        since = "" if within is None else f" (since {local_time(timezone.now() - within, zone=True)})"
        return f"failed run(s) of flow {printable(name)!r}{since}"

    def call(self, run_id: uuid.UUID) -> int:
        return retry_run(run_id, using=self.using)

    def said(self, run_id: uuid.UUID, count: int, *, dry_run: bool) -> str:
        if dry_run:
            return f"would retry run {run_id}: {count} task(s) would be queued again"
        return f"retried run {run_id}: {count} task(s) queued again"
