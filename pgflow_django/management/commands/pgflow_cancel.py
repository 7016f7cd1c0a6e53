"""``manage.py pgflow_cancel RUN_ID``: cancel a started run, through the same call as the admin action."""

from __future__ import annotations

from typing import Any, Final

from django.core.management.base import CommandError, CommandParser

from pgflow_django.management.cli import USAGE_ERROR, PgflowCommand, run_id
from pgflow_django.runs.client import cancel_run

ALREADY_FINISHED: Final = 3
"""Exit code when the run had already finished: nothing changed (a script can tell it from a cancel)."""


class Command(PgflowCommand):
    help = (
        "Cancel a started run: it ends failed with the error 'cancelled' (or 'cancelled: REASON'), its\n"
        "unfinished tasks are cancelled and their messages archived, so no worker claims or completes\n"
        "anything of it afterwards (a handler already running finishes, but its result is ignored).\n"
        "A run that has already finished is left as it is."
    )
    examples = """
  manage.py pgflow_cancel 0b4e6c1e-8f5a-4d2b-9a57-3c1f2e8d9a10
  manage.py pgflow_cancel 0b4e6c1e-8f5a-4d2b-9a57-3c1f2e8d9a10 \\
      --reason "duplicate order"

exit codes: 0 cancelled; 1 no such run, or another error; 2 bad arguments; 3 the run had already
finished (nothing changed)
"""

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("run_id", type=run_id, metavar="RUN_ID", help="id of the run to cancel")
        parser.add_argument(
            "--reason", metavar="TEXT", help="recorded with the run's error: 'cancelled: TEXT'"
        )

    def run(self, *args: Any, **options: Any) -> None:
        reason: str | None = options["reason"]
        try:
            result = cancel_run(options["run_id"], reason=reason, using=self.using)
        except ValueError as exc:
            raise CommandError(f"--reason: {exc}", returncode=USAGE_ERROR) from None
        if result.cancelled:
            self.stdout.write(f"cancelled run {result.run_id}")
            return
        raise CommandError(
            f"run {result.run_id} had already finished ({result.status}); nothing changed",
            returncode=ALREADY_FINISHED,
        )
