"""``manage.py pgflow_worker --flow F``: run the tasks of one flow until SIGTERM/SIGINT."""

from __future__ import annotations

import logging
import os
import sys
from argparse import ArgumentParser
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError

logger = logging.getLogger("pgflow_django.worker")


class Command(BaseCommand):
    help = (
        "Run a pgflow worker for one flow: compile or verify the flow, register, then claim and run its "
        "tasks until SIGTERM/SIGINT (a second signal exits at once). Uses at most --concurrency + 3 "
        "database connections. Defaults come from settings.PGFLOW."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--flow", required=True, help="slug of the flow whose queue to work (required)")
        parser.add_argument("--concurrency", type=int, help="handler threads (PGFLOW WORKER_CONCURRENCY)")
        parser.add_argument(
            "--batch-size", type=int, help="messages read per claim, at most (PGFLOW WORKER_BATCH_SIZE)"
        )
        parser.add_argument(
            "--poll-interval",
            type=float,
            help="seconds between fallback reads of an idle queue (PGFLOW WORKER_POLL_INTERVAL)",
        )
        parser.add_argument(
            "--max-poll-seconds",
            type=float,
            help="while notifications work, idle fallback reads back off up to this many seconds "
            "(PGFLOW WORKER_MAX_POLL_SECONDS)",
        )
        parser.add_argument(
            "--shutdown-timeout",
            type=float,
            help="seconds in-flight tasks get to finish after SIGTERM (PGFLOW WORKER_SHUTDOWN_TIMEOUT)",
        )
        parser.add_argument(
            "--heartbeat-seconds", type=float, help="heartbeat period (PGFLOW WORKER_HEARTBEAT_SECONDS)"
        )
        parser.add_argument(
            "--stalled-check-seconds",
            type=float,
            help="period of stalled-task recovery, one worker at a time (PGFLOW STALLED_CHECK_SECONDS)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        from pgflow_django.compiler import FlowMismatch
        from pgflow_django.worker import PreflightError, Worker, WorkerOptions
        from pgflow_django.worker.preflight import resolve_flow

        try:
            flow = resolve_flow(options["flow"])
            worker_options = WorkerOptions.from_settings(
                flow.slug,
                concurrency=options["concurrency"],
                batch_size=options["batch_size"],
                poll_interval=options["poll_interval"],
                max_poll_seconds=options["max_poll_seconds"],
                shutdown_timeout=options["shutdown_timeout"],
                heartbeat_seconds=options["heartbeat_seconds"],
                stalled_check_seconds=options["stalled_check_seconds"],
            )
            worker = Worker(flow, worker_options)
            status = worker.prepare()
        except (PreflightError, FlowMismatch, ImproperlyConfigured, ValueError) as exc:
            raise CommandError(str(exc)) from None
        logger.info("flow %s %s", flow.slug, status)
        try:
            code = worker.run()
        except Exception as exc:
            raise CommandError(f"worker stopped: {exc}") from exc
        if worker.abandoned_handlers:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
