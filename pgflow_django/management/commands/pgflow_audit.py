"""``manage.py pgflow_audit``: the upgrade preflight's checks, read-only, before migrating.

It runs the same shipped SQL as migration 0003's preflight, so a clean audit means the migration's
own check will pass unless the data changes in between (the migration checks again under its locks).
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError, CommandParser
from django.db import connections, transaction
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from pgflow_django.db.query import fetch_value
from pgflow_django.db.upgrade import AuditCheck, Finding, current_audit_checks, format_report, run_audit
from pgflow_django.management import queries
from pgflow_django.management.cli import PgflowCommand, add_format_argument


class Command(PgflowCommand):
    help = (
        "Check, read-only, that the database can be upgraded to the persisted-queue-identity schema\n"
        "(migration 0003): queue aliases, missing PGMQ objects, duplicate or unmatched messages, flows\n"
        "without one default queue, and slugs the new rules reject. Each problem is reported with a\n"
        "count, at most 5 sample keys and a repair hint (see docs/upgrading.md). Nothing is changed:\n"
        "the checks run in a read-only transaction. JSON output carries message ids as strings."
    )
    examples = """
  # the report; exit 1 when something blocks the upgrade
  manage.py pgflow_audit
  # every check with its count, samples and hint
  manage.py pgflow_audit --format json

exit codes: 0 every check passed; 1 a check found problems, or another error; 2 bad arguments
"""

    def add_arguments(self, parser: CommandParser) -> None:
        add_format_argument(parser)

    def run(self, *args: Any, **options: Any) -> None:
        findings = self._audit(no_color=options["no_color"])
        if options["format"] == "json":
            self.write_json(
                {
                    "ok": all(finding.ok for finding in findings),
                    "checks": [finding.as_dict() for finding in findings],
                }
            )
        elif options["verbosity"] > 0 or any(not finding.ok for finding in findings):
            self.stdout.write(format_report(findings))
        failing = [finding.check for finding in findings if not finding.ok]
        if failing:
            raise CommandError(
                f"{len(failing)} of {len(findings)} checks found problems ({', '.join(failing)}); "
                "repair them before migrating (docs/upgrading.md)"
            )

    def _audit(self, *, no_color: bool) -> list[Finding]:
        """Run the checks in a read-only transaction (a savepoint inside a caller's), then roll it back."""
        console = self.console(stderr=True, no_color=no_color)
        columns = (
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
        )
        with (
            Progress(*columns, console=console, transient=True, disable=not console.is_terminal) as bar,
            transaction.atomic(using=self.using),
            connections[self.using].cursor() as cursor,
        ):
            fetch_value(cursor, queries.READ_ONLY_TRANSACTION)
            checks = current_audit_checks(cursor)
            task = bar.add_task("auditing", total=len(checks))

            def progress(check: AuditCheck, index: int, total: int) -> None:
                bar.update(task, description=f"checking {check.name}", completed=index)

            findings = run_audit(cursor, progress, checks)
            bar.update(task, completed=len(checks))
            transaction.set_rollback(True, using=self.using)
        return findings
