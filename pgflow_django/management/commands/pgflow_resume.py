"""``manage.py pgflow_resume``: clear a subscription's pause (operator or fatal) so workers may run again."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from django.core.management.base import CommandError, CommandParser

from pgflow_django.flows.slugs import InvalidSlug, validate_flow_slug, validate_slug, version_of
from pgflow_django.management.cli import PgflowCommand, add_format_argument
from pgflow_django.runs.operations import resume


class Command(PgflowCommand):
    help = (
        "Clear the pause of a worker subscription (a flow, or with --step one step of a step-queued flow),\n"
        "whether an operator set it (pgflow_pause)\n"
        "or a worker did when it met unsupported messages (reason fatal: inspect those messages first).\n"
        "Workers started afterwards run normally."
    )
    examples = """
  manage.py pgflow_resume process_order
  manage.py pgflow_resume support_steps --step deliver

exit codes: 0 cleared, or nothing was paused; 1 error; 2 bad arguments
"""

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("flow", help="flow slug whose pause to clear")
        parser.add_argument("--step", default="", help="clear the pause of this step's workers only")
        add_format_argument(parser)

    def run(self, *args: Any, **options: Any) -> None:
        try:
            validate_flow_slug(version_of(options["flow"]), "flow")  # a version's stored slug too
            if options["step"]:
                validate_slug(options["step"], "--step")
        except InvalidSlug as exc:
            raise CommandError(str(exc)) from None
        cleared = resume(options["flow"], options["step"], using=self.using)
        if options["format"] == "json":
            self.write_json({"cleared": None if cleared is None else asdict(cleared)})
        elif cleared is None:
            step = f" --step {options['step']}" if options["step"] else ""
            self.stdout.write(f"{options['flow']}{step} was not paused")
        else:
            self.stdout.write(
                f"resumed {cleared.flow_slug} (was paused: {cleared.reason}"
                + (f", {cleared.detail}" if cleared.detail else "")
                + ")"
            )
