"""``manage.py pgflow_prune_shared QUEUE --older-than 30d``: queue-wide retention of a shared archive."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandParser

from pgflow_django.management.cli import PgflowCommand, add_format_argument, add_retention_argument
from pgflow_django.runs.operations import prune_shared_archive


class Command(PgflowCommand):
    help = (
        "Delete archived messages older than --older-than from the archive of a declared shared queue,\n"
        "whichever flow they belonged to. pgflow_prune never touches shared archives, because several\n"
        "flows' messages meet there and one flow's retention must not apply to another's; this command\n"
        "is the queue-wide retention. Live messages and the queue itself are never touched."
    )
    examples = """
  manage.py pgflow_prune_shared thread_processing --older-than 30d
  manage.py pgflow_prune_shared thread_processing --older-than 12h --format json

durations: whole numbers with a unit s, m, h, d or w, optionally combined (7d, 12h, 30m, 3600s, 1d12h)
exit codes: 0 done; 1 error (e.g. not a shared queue: the line lists the shared queues); 2 bad arguments
"""

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("queue", help="a shared queue declared by pgflow (a name used in route_flow)")
        add_retention_argument(parser, "archived messages younger than this")
        add_format_argument(parser)

    def run(self, *args: Any, **options: Any) -> None:
        with self.working("pruning", no_color=options["no_color"]):
            deleted = prune_shared_archive(options["queue"], options["older_than"], using=self.using)
        if options["format"] == "json":
            self.write_json({"queue": options["queue"], "archived_messages": deleted})
        elif options["verbosity"] > 0:
            self.stdout.write(f"pruned {deleted} archived message(s) of shared queue {options['queue']}")
