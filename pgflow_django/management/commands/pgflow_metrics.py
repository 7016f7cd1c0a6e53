"""``manage.py pgflow_metrics``: the database-wide gauges in Prometheus' text format."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError, CommandParser

from pgflow_django.management.cli import PgflowCommand


class Command(PgflowCommand):
    help = (
        "Print the database-wide gauges (queue depth, oldest visible message, runs by status, stalled\n"
        "tasks, live workers, pauses) in Prometheus' text format, from one bounded statement: for\n"
        "node_exporter's textfile collector (--output writes the file atomically) or a one-off look.\n"
        "Workers' own counters are on their --metrics-port. Needs pgflow-django[metrics]."
    )
    examples = """
  manage.py pgflow_metrics
  manage.py pgflow_metrics --output /var/lib/node_exporter/textfile/pgflow.prom

exit codes: 0 written; 1 database error or prometheus-client missing; 2 bad arguments
"""

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--output", help="write to this file (atomically: a temporary file, renamed)")

    def run(self, *args: Any, **options: Any) -> None:
        from django.db import DatabaseError

        from pgflow_django.db.connect import first_line
        from pgflow_django.observability.metrics import MetricsUnavailable, database_registry, database_text

        try:
            if options["output"]:
                from prometheus_client import write_to_textfile

                write_to_textfile(options["output"], database_registry())
            else:
                self.stdout.write(database_text(self.using).decode(), ending="")
        except MetricsUnavailable as exc:
            raise CommandError(str(exc)) from None
        except DatabaseError as exc:
            raise CommandError(f"cannot read the metrics from the database: {first_line(exc)}") from None
        except OSError as exc:
            raise CommandError(f"cannot write {options['output']}: {exc.strerror}") from None
