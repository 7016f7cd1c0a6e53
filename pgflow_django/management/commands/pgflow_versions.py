"""``manage.py pgflow_versions FLOW``: the versions of a flow, their runs, workers, and which are drained."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandParser

from pgflow_django.management.cli import PgflowCommand, add_format_argument, printable
from pgflow_django.management.layout import Column, FitTable, local_time
from pgflow_django.runs.versions import FlowVersion, flow_versions


class Command(PgflowCommand):
    help = (
        "List the versions of a flow, oldest first: each changed definition compiled under the flow's slug\n"
        "is a version, and each run stays on the version it started on. For each: its stored slug, its\n"
        "runs by status, the live workers that serve it, its first and last start, and its state: newest\n"
        "(new runs start there), serving (earlier, with unfinished runs: keep a worker with its code), or\n"
        "drained (earlier, nothing unfinished: stop its workers, delete it with pgflow_delete_flow FLOW\n"
        "--version N). Read-only."
    )
    examples = """
  manage.py pgflow_versions process_order
  manage.py pgflow_versions process_order --format json

exit codes: 0 shown; 1 no such flow, or another error; 2 bad arguments
"""

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("flow", metavar="FLOW", help="the flow's slug")
        add_format_argument(parser)

    def run(self, *args: Any, **options: Any) -> None:
        versions = flow_versions(options["flow"], using=self.using)
        if options["format"] == "json":
            self.write_json([_as_json(version) for version in versions])
            return
        table = FitTable(
            Column("VERSION", label="version", title=True),
            Column("STORED AS", label="stored as"),
            Column("STATE", label="state"),
            Column("UNFINISHED", label="unfinished", justify="right"),
            Column("COMPLETED", label="completed", justify="right"),
            Column("FAILED", label="failed", justify="right"),
            Column("WORKERS", label="workers", justify="right"),
            Column("FIRST START", label="first start", no_wrap=True),
            Column("LAST START", label="last start", no_wrap=True),
            lined=False,
        )
        for version in versions:
            table.add_row(
                printable(version.name),
                printable(version.flow_slug),
                version.state,
                str(version.unfinished),
                str(version.completed),
                str(version.failed),
                str(version.live_workers),
                local_time(version.first_started_at),
                local_time(version.last_started_at),
            )
        self.console().print(table)


def _as_json(version: FlowVersion) -> dict[str, Any]:
    return {
        "flow_slug": version.flow_slug,
        "version_of": version.version_of,
        "version_number": version.number,
        "version": version.version,
        "state": version.state,
        "drained": version.drained,
        "created_at": version.created_at,
        "runs": {"started": version.unfinished, "completed": version.completed, "failed": version.failed},
        "live_workers": version.live_workers,
        "first_started_at": version.first_started_at,
        "last_started_at": version.last_started_at,
    }
