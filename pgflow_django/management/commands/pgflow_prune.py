"""``manage.py pgflow_prune --older-than 7d``: delete finished runs and old queue archives."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from django.core.management.base import CommandParser

from pgflow_django.management.cli import PgflowCommand, add_format_argument, add_retention_argument
from pgflow_django.runs.operations import prune


class Command(PgflowCommand):
    help = (
        "Delete runs that completed or failed longer ago than --older-than, with their step states and\n"
        "tasks; archived queue messages older than that; and workers silent for that long.\n"
        "Runs still in progress are never deleted."
    )
    examples = """
  manage.py pgflow_prune --older-than 7d
  manage.py pgflow_prune --older-than 12h --format json
  manage.py pgflow_prune --older-than 1h30m

durations: whole numbers with a unit s, m, h, d or w, optionally combined (7d, 12h, 30m, 3600s, 1d12h)
exit codes: 0 done; 1 error; 2 bad arguments
"""

    def add_arguments(self, parser: CommandParser) -> None:
        add_retention_argument(parser, "what finished more recently than this")
        add_format_argument(parser)

    def run(self, *args: Any, **options: Any) -> None:
        with self.working("pruning", no_color=options["no_color"]):
            result = prune(options["older_than"], using=self.using)
        if options["format"] == "json":
            self.write_json(asdict(result))
        elif options["verbosity"] > 0:
            self.stdout.write(
                f"pruned {result.runs} run(s), {result.step_states} step state(s), "
                f"{result.step_tasks} task(s), "
                f"{result.workers} worker(s) and {result.archived_messages} archived message(s)"
            )
