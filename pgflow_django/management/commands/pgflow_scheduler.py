"""``manage.py pgflow_scheduler``: fire due schedules without running a worker."""

from __future__ import annotations

import argparse
import logging
import signal
import threading
from datetime import datetime
from types import FrameType
from typing import Any

import psycopg
from django.core.management.base import CommandError, CommandParser

from pgflow_django.management.cli import (
    PgflowCommand,
    positive_float,
    shown_argument,
)

logger = logging.getLogger("pgflow_django.schedules")


class Command(PgflowCommand):
    help = (
        "Fire due schedules: plan their coming ticks and start the run of every due tick, each tick\n"
        "exactly once however many schedulers and workers run. Every pgflow_worker does this on its\n"
        "maintenance loop unless started with --no-scheduler; run this command when no worker should\n"
        "(or as the only scheduler). SIGTERM or SIGINT stops it after the current pass."
    )
    examples = """
  manage.py pgflow_scheduler                 a pass every second until stopped
  manage.py pgflow_scheduler --interval 5
  manage.py pgflow_scheduler --once          one pass, then exit (cron, tests)
  manage.py pgflow_scheduler --once --now 2026-03-29T01:00:00+00:00

exit codes: 0 stopped or done; 1 error; 2 bad arguments
"""

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--once", action="store_true", help="run one pass and exit")
        parser.add_argument(
            "--interval", type=positive_float, default=1.0, help="seconds between passes (default 1)"
        )
        parser.add_argument(
            "--now",
            type=aware_timestamp,
            help="with --once: the time to fire at, an ISO timestamp with offset (default: the clock)",
        )

    def run(self, *args: Any, **options: Any) -> None:
        from pgflow_django.conf import get_settings
        from pgflow_django.db.connect import connection_params
        from pgflow_django.db.pooler import require_announced_pooler
        from pgflow_django.schedules.service import run_pass
        from pgflow_django.worker.connection import connect

        now: datetime | None = options["now"]
        if now is not None and not options["once"]:
            raise CommandError("--now needs --once: a running scheduler fires on the clock")
        stop = threading.Event()
        if not options["once"]:
            self._stop_on_signals(stop)
        require_announced_pooler(self.using)
        params = connection_params(self.using, get_settings().pooler)
        conn = connect(params, "scheduler")
        try:
            while True:
                try:
                    result = run_pass(conn, now=now)
                except psycopg.OperationalError as exc:
                    if options["once"]:
                        raise
                    logger.warning("scheduler pass failed (%s); reconnecting", str(exc).strip())
                    conn.close()
                    if stop.wait(options["interval"]):
                        return
                    conn = connect(params, "scheduler")
                    continue
                if options["verbosity"] > 0:
                    for tick in result.fired:
                        self.stdout.write(
                            f"fired {tick.schedule_name} {tick.tick.isoformat()} run {tick.run_id}"
                        )
                    if options["once"] and not result.locked:
                        self.stdout.write("another scheduler is firing; nothing done")
                if options["once"] or stop.wait(options["interval"]):
                    return
        finally:
            conn.close()

    @staticmethod
    def _stop_on_signals(stop: threading.Event) -> None:
        def handler(signum: int, frame: FrameType | None) -> None:
            stop.set()

        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, handler)
            signal.signal(signal.SIGINT, handler)


def aware_timestamp(text: str) -> datetime:
    """An ISO 8601 timestamp with a UTC offset, as ``--now`` takes it."""
    try:
        value = datetime.fromisoformat(text.strip()) if text.isascii() and len(text) <= 64 else None
    except ValueError:
        value = None
    if value is None or value.tzinfo is None:
        raise argparse.ArgumentTypeError(
            "expected an ISO timestamp with an offset, e.g. 2026-01-01T00:00:00+00:00, "
            f"got {shown_argument(text)}"
        )
    return value
