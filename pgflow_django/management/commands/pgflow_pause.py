"""``manage.py pgflow_pause``: the deployment fence: stop a flow's workers and keep new ones from starting."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from django.core.management.base import CommandParser

from pgflow_django.management.cli import PgflowCommand, add_format_argument, printable
from pgflow_django.runs.operations import pause, pauses


class Command(PgflowCommand):
    help = (
        "Pause a worker subscription (a flow, or with --step one step of a step-queued flow): its running\n"
        "workers stop polling at their next heartbeat and new workers refuse to start, until pgflow_resume.\n"
        "A flow's pause also holds its step workers. Queued work stays in the queue.\n\n"
        "With no FLOW, lists the paused subscriptions (operator pauses, and fatal ones set by a worker\n"
        "that met unsupported messages)."
    )
    examples = """
  manage.py pgflow_pause process_order --detail "deploying v42"
  manage.py pgflow_pause support_steps --step deliver
  manage.py pgflow_pause                      # list paused subscriptions

exit codes: 0 done; 1 error (e.g. unknown flow); 2 bad arguments
"""

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "flow",
            nargs="?",
            help="flow slug to pause, every version of it (a version's stored slug: that version); omit to "
            "list pauses",
        )
        parser.add_argument("--step", default="", help="pause only this step's workers (a step-queued flow)")
        parser.add_argument("--detail", help="a note stored with the pause (why, who, until when)")
        add_format_argument(parser)

    def run(self, *args: Any, **options: Any) -> None:
        if options["flow"] is None:
            found = pauses(using=self.using)
            if options["format"] == "json":
                self.write_json([asdict(p) for p in found])
                return
            if not found:
                self.stdout.write("no paused subscriptions")
            for item in found:
                self.stdout.write(
                    f"{item.flow_slug}{' step=' + item.step_slug if item.step_slug else ''} "
                    f"queue={item.queue_name} {item.reason}"
                    + (f": {printable(item.detail)}" if item.detail else "")
                )
            return
        result = pause(options["flow"], options["step"], detail=options["detail"], using=self.using)
        name = result.flow_slug + (f" --step {result.step_slug}" if result.step_slug else "")
        if options["format"] == "json":
            self.write_json(asdict(result))
        elif result.reason == "fatal":
            self.stdout.write(
                f"{result.flow_slug} already has a fatal pause ({result.detail}); kept it. Resolve it, then "
                f"run pgflow_resume {name}"
            )
        else:
            self.stdout.write(
                f"paused {name} (queue {result.queue_name}): its workers stop at their next "
                "heartbeat; pgflow_resume to undo"
            )
