"""``manage.py pgflow_limits``: each flow's concurrency keys and rate limits, and what their keys hold now."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandParser
from django.db import connections

from pgflow_django.db import queries as db_queries
from pgflow_django.db.query import fetch_all
from pgflow_django.flows.flow_control import describe
from pgflow_django.flows.flow_control_table import FLOW_CONTROL_HEADERS, flow_control_cells
from pgflow_django.management.cli import PgflowCommand, add_format_argument, positive_int, printable
from pgflow_django.management.layout import Column, FitTable

LIMIT_WIDTH = 30
"""A limit reads as one phrase (``concurrency 2 per tenant_id``): narrower, the table becomes records."""


class Command(PgflowCommand):
    help = (
        "Show flow control: every concurrency key and rate limit of each compiled flow (or of --flow), and\n"
        "for each key the claims have met: the tasks started in a slot of the key now, the tasks deferred\n"
        "by the limit and still queued (they spent no attempt), and a rate key's tokens now. The busiest\n"
        "keys come first. Read-only."
    )
    examples = """
  manage.py pgflow_limits
  manage.py pgflow_limits --flow process_order --keys 50
  manage.py pgflow_limits --format json | jq '.[] | select(.deferred > 0)'

exit codes: 0 shown; 1 error; 2 bad arguments
"""

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--flow", metavar="FLOW", help="only this flow's limits")
        parser.add_argument(
            "--keys", type=positive_int, default=200, metavar="N", help="show at most N rows (default 200)"
        )
        add_format_argument(parser)

    def run(self, *args: Any, **options: Any) -> None:
        with connections[self.using].cursor() as cursor:
            rows = fetch_all(
                cursor, db_queries.FLOW_CONTROL, {"flow": options["flow"], "limit": options["keys"]}
            )
        if options["format"] == "json":
            self.write_json(
                [
                    {
                        "flow_slug": row.flow_slug,
                        "step_slug": row.step_slug or None,
                        "limit": describe(
                            row.kind, row.key_source, row.key_field, row.amount, row.period, row.burst
                        ),
                        "kind": row.kind,
                        "key": row.key,
                        "started": row.started,
                        "deferred": row.deferred,
                        "tokens": None if row.tokens is None else round(row.tokens, 3),
                    }
                    for row in rows
                ]
            )
            return
        if not rows:
            self.stdout.write("no flow has a concurrency key or a rate limit")
            return
        table = FitTable(
            *(
                Column(
                    header.upper(),
                    label=header,
                    title=header == "flow",
                    justify="right" if header in _NUMBERS else "left",
                    no_wrap=header == "key",
                    min_width=LIMIT_WIDTH if header == "limit" else 0,
                )
                for header in FLOW_CONTROL_HEADERS
            ),
            lined=False,
        )
        for row in rows:
            table.add_row(*(printable(cell) for cell in flow_control_cells(row)))
        self.console().print(table)


_NUMBERS = frozenset({"started", "deferred", "tokens"})
