"""``manage.py pgflow_health``: exit 0 when healthy, 1 with one line per problem."""

from __future__ import annotations

import sys
from typing import Any

from django.core.management.base import CommandParser

from pgflow_django.management.cli import PgflowCommand, positive_float


class Command(PgflowCommand):
    help = (
        "Check what an exec probe or a cron job should know, in one bounded statement: the database is\n"
        "reachable and migrated, every step of each flow has a live worker, no subscription is paused,\n"
        "and (with --max-queue-age) no queue's oldest visible message is older than that. Prints one line\n"
        "per problem on stderr and exits 1, or prints ok and exits 0."
    )
    examples = """
  manage.py pgflow_health
  manage.py pgflow_health --flow process_order --max-queue-age 300

exit codes: 0 healthy; 1 at least one problem (each on its own line); 2 bad arguments
"""

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--flow", action="append", help="check this flow only (repeatable; default: every compiled flow)"
        )
        parser.add_argument(
            "--max-queue-age",
            type=positive_float,
            metavar="S",
            help="a problem when a queue's oldest visible message is older than S seconds",
        )

    def run(self, *args: Any, **options: Any) -> None:
        from pgflow_django.management.health import problems

        found = problems(options["flow"], options["max_queue_age"], using=self.using)
        if not found:
            self.stdout.write("ok")
            return
        for line in found:
            self.stderr.write(line)
        sys.exit(1)
