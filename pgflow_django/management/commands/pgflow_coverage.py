"""``manage.py pgflow_coverage``: persisted routes and live tasks vs live workers, as a deploy gate."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any, Final

from django.core.management.base import CommandError, CommandParser
from rich.console import Console

from pgflow_django.management.cli import PgflowCommand, add_format_argument, positive_float
from pgflow_django.management.layout import Column, FitTable
from pgflow_django.management.progress import NOTE_WIDTH
from pgflow_django.runs.coverage import (
    LIVE_HEARTBEATS,
    RouteCoverage,
    compiled_flow_count,
    coverage,
    coverage_sql,
    live_worker_seconds,
)

UNCOVERED: Final = 3
"""Exit code when at least one (flow, step, queue) has no live worker."""

SQL_HEADING: Final = "-- the query (copy into psql):"
_COLUMNS: Final = ("FLOW", "STEP", "QUEUE", "MODE", "PENDING", "LIVE", "NOTE")


class Command(PgflowCommand):
    help = (
        "Check that every (flow, step, queue) has a live worker: compares the persisted routes (and the\n"
        "queues live tasks are still in) with the live workers' registrations (pgflow.workers and\n"
        "pgflow.worker_support). Run it for a new concrete flow version after starting its workers and\n"
        "before switching callers to it, or in a deploy script: exit code 3 means some step's work would\n"
        "wait for a worker that is not there.\n\n"
        "Lists each (flow, step, queue) without a live worker, with its pending (queued or started) tasks;\n"
        "-v 2 also prints the SQL it ran, to copy into psql (--sql prints only that). A worker is live\n"
        "when it is not stopped, not deprecated, and its heartbeat is younger than --live-seconds\n"
        f'(default {LIVE_HEARTBEATS} x PGFLOW["WORKER_HEARTBEAT_SECONDS"]).'
    )
    examples = """
  # uncovered routes of every flow (-v 2: and the query)
  manage.py pgflow_coverage
  # gate a new version before switching callers
  manage.py pgflow_coverage --flow support_v2
  # every route with its live worker count
  manage.py pgflow_coverage --all
  manage.py pgflow_coverage --format json \\
      | jq '.routes[] | select(.live_workers == 0)'
  manage.py pgflow_coverage --sql --live-seconds 60 > coverage.sql
  psql -f coverage.sql

exit codes: 0 every route has a live worker (or no flow is compiled); 1 error (e.g. unknown flow);
2 bad arguments; 3 at least one (flow, step, queue) has no live worker
"""

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--flow", metavar="FLOW", help="only this concrete flow's routes and tasks")
        parser.add_argument(
            "--all", action="store_true", help="list covered routes too, with their live worker counts"
        )
        parser.add_argument(
            "--live-seconds",
            type=positive_float,
            metavar="N",
            help=f"heartbeat window in seconds that makes a worker live (default {LIVE_HEARTBEATS} x "
            'PGFLOW["WORKER_HEARTBEAT_SECONDS"], 15 with the default settings)',
        )
        add_format_argument(parser)
        parser.add_argument(
            "--sql",
            action="store_true",
            help="print only the query (with its parameters filled in); run nothing",
        )

    def run(self, *args: Any, **options: Any) -> None:
        flow: str | None = options["flow"]
        live_seconds: float = options["live_seconds"] or live_worker_seconds()
        if options["sql"]:
            conflicting = [flag for flag, given in (("--all", options["all"]),) if given]
            if options["format"] == "json":
                conflicting.append("--format json")
            if conflicting:
                raise CommandError(
                    f"--sql prints only the query; it cannot be combined with {', '.join(conflicting)}"
                )
            self.stdout.write(coverage_sql(flow=flow, live_seconds=live_seconds), ending="")
            return
        query = coverage_sql(flow=flow, live_seconds=live_seconds)
        routes = coverage(using=self.using, flow=flow, live_seconds=live_seconds)
        uncovered = [route for route in routes if not route.covered]
        shown = routes if options["all"] else uncovered
        no_flows = not routes and compiled_flow_count(self.using) == 0
        if options["format"] == "json":
            self.write_json(
                {
                    "ok": not uncovered,
                    "flow": flow,
                    "live_seconds": live_seconds,
                    "total": len(routes),
                    "uncovered": len(uncovered),
                    "routes": [{**asdict(route), "covered": route.covered} for route in shown],
                    "sql": query,
                }
            )
        else:
            self._text(routes, uncovered, shown, flow, live_seconds, no_flows, options["no_color"])
            if options["verbosity"] >= 2:
                self.stdout.write(f"\n{SQL_HEADING}\n{query}", ending="")
        if uncovered:
            raise CommandError(
                f"{len(uncovered)} of {len(routes)} (flow, step, queue) route(s) have no live worker",
                returncode=UNCOVERED,
            )

    def _text(
        self,
        routes: list[RouteCoverage],
        uncovered: list[RouteCoverage],
        shown: list[RouteCoverage],
        flow: str | None,
        live_seconds: float,
        no_flows: bool,
        no_color: bool,
    ) -> None:
        if no_flows:
            self.stdout.write("no flows compiled: nothing needs a worker (run manage.py pgflow_compile)")
            return
        console = self.console(no_color=no_color)
        live = f"live: not stopped, not deprecated, heartbeat within {live_seconds:g} s"
        flows = len({route.flow_slug for route in routes})
        scope = f"flow {flow}" if flow else f"{flows} flow(s)"
        if uncovered:
            summary = f"{len(uncovered)} of {len(routes)} route(s) of {scope} have no live worker ({live})"
        else:
            summary = f"all {len(routes)} route(s) of {scope} have a live worker ({live})"
        console.print(summary)
        if shown:
            console.print()
            self._table(shown, console)

    def _table(self, routes: list[RouteCoverage], console: Console) -> None:
        table = FitTable(
            *(
                Column(
                    header,
                    label=header.lower(),
                    title=header == "FLOW",
                    justify="right" if header in ("PENDING", "LIVE") else "left",
                    no_wrap=header != "NOTE",
                    min_width=NOTE_WIDTH if header == "NOTE" else 0,
                )
                for header in _COLUMNS
            ),
            lined=False,
            header_style="",
        )
        for route in routes:
            table.add_row(
                route.flow_slug,
                route.step_slug,
                route.queue_name,
                route.queue_mode,
                str(route.pending_tasks),
                str(route.live_workers),
                _note(route),
            )
        console.print(table)


def _note(route: RouteCoverage) -> str:
    notes = []
    if not route.in_route:
        notes.append("live tasks only: not in the persisted route (an older route)")
    if route.paused:
        notes.append(f"paused ({route.paused})")
    return "; ".join(notes)
