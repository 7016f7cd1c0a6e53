"""``manage.py pgflow_delete_flow FLOW``: delete one compiled flow with all its data and its queue."""

from __future__ import annotations

import sys
from typing import Any

from django.core.management.base import CommandError, CommandParser

from pgflow_django.management.cli import PgflowCommand
from pgflow_django.operations import FlowSummary, delete_flow, describe_flow


class Command(PgflowCommand):
    help = (
        "Delete a compiled flow: its runs, step states, tasks, steps and its PGMQ queue (live messages\n"
        "included). This cannot be undone. Asks for confirmation on a terminal; without a terminal\n"
        "(scripts, CI) it refuses unless --yes is given. Stop the flow's workers first."
    )
    examples = """
  manage.py pgflow_delete_flow process_order_v1
  manage.py pgflow_delete_flow process_order_v1 --yes     no question (scripts)

exit codes: 0 deleted; 1 not confirmed, no such flow, or another error; 2 bad arguments
"""
    stealth_options = ("stdin",)

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("flow", metavar="FLOW", help="slug of the compiled flow to delete")
        parser.add_argument("--yes", action="store_true", help="do not ask for confirmation")

    def run(self, *args: Any, **options: Any) -> None:
        slug: str = options["flow"]
        summary = describe_flow(slug)
        if summary.live_workers:
            self.stderr.write(
                self.style.WARNING(
                    f"warning: {summary.live_workers} live worker(s) serve flow {slug!r}; they will fail "
                    "once its queue is gone: stop them first"
                )
            )
        if not options["yes"]:
            self._confirm(summary, options.get("stdin") or sys.stdin)
        with self.working(f"deleting flow {slug!r}", no_color=options["no_color"]):
            deleted = delete_flow(slug)
        if options["verbosity"] > 0:
            self.stdout.write(f"deleted flow {slug!r}: {deleted.runs} run(s) and its queue")

    def _confirm(self, summary: FlowSummary, stdin: Any) -> None:
        slug = summary.flow_slug
        if not stdin.isatty():
            raise CommandError(
                f"refusing to delete flow {slug!r} without confirmation: standard input is not a terminal; "
                "pass --yes to delete it"
            )
        active = f", {summary.active_runs} still in progress" if summary.active_runs else ""
        self.stdout.write(
            f"This deletes flow {slug!r} with its {summary.runs} run(s){active}, their tasks and its queue."
        )
        self.stdout.write("Type the flow slug to confirm: ", ending="")
        self.stdout.flush()
        answer = stdin.readline()
        if answer.strip() != slug:
            raise CommandError(f"not confirmed; flow {slug!r} was not deleted")
