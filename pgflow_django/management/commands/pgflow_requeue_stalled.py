"""``manage.py pgflow_requeue_stalled``: recover tasks whose worker vanished, once, now."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from django.core.management.base import CommandParser

from pgflow_django.management.cli import PgflowCommand, add_format_argument
from pgflow_django.runs.operations import requeue_stalled


class Command(PgflowCommand):
    help = (
        "Requeue stalled tasks: started tasks whose claim is older than their step's timeout + 30 s.\n\n"
        "Each is made visible again for another worker, at most 3 times and while attempts remain; past\n"
        "that it is marked permanently stalled and its step's when_exhausted policy applies. Workers run\n"
        "this periodically themselves, so a cron job is optional; use it when no worker is running."
    )
    examples = """
  manage.py pgflow_requeue_stalled
  manage.py pgflow_requeue_stalled --format json

exit codes: 0 done (also when nothing was stalled); 1 error; 2 bad arguments
"""

    def add_arguments(self, parser: CommandParser) -> None:
        add_format_argument(parser)

    def run(self, *args: Any, **options: Any) -> None:
        with self.working("looking for stalled tasks", no_color=options["no_color"]):
            result = requeue_stalled(using=self.using)
        if options["format"] == "json":
            self.write_json(asdict(result))
        elif options["verbosity"] > 0:
            self.stdout.write(
                f"requeued {result.requeued} stalled task(s); "
                f"{result.permanently_stalled} permanently stalled (exhausted)"
            )
