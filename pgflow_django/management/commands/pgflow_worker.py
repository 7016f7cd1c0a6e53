"""``manage.py pgflow_worker --flow F``: run the tasks of one flow until SIGTERM/SIGINT."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import Any

from django.core.management.base import CommandError, CommandParser

from pgflow_django.management.cli import PgflowCommand, positive_float, positive_int

logger = logging.getLogger("pgflow_django.worker")


def non_negative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds >= 0, got {text!r}") from None
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"expected a number of seconds >= 0, got {text!r}")
    return value


class Command(PgflowCommand):
    help = (
        "Run a worker for one flow: check the database, compile or verify the flow (the pgflow_compile\n"
        "code path), register in pgflow.workers, then claim and run its tasks until SIGTERM or SIGINT.\n"
        "A plain flow has one queue for all its steps; a step-queued flow (with_step_queues) has one per\n"
        "step, and each of its workers runs one step: --step is required for it and refused otherwise.\n"
        "Routed flows (route_flow) send steps to shared queues: --queue Q with one --flow per routed flow\n"
        "runs every step their persisted routes send to Q; work it does not support is left untouched.\n"
        "The first signal stops polling and lets in-flight tasks finish within --shutdown-timeout\n"
        "(the rest are released); a second one exits at once and leaves them to stalled-task recovery.\n"
        "A worker holds at most --concurrency + 3 database connections. Defaults come from\n"
        "settings.PGFLOW (WORKER_* keys)."
    )
    examples = """
  manage.py pgflow_worker --flow process_order
  manage.py pgflow_worker --flow support_steps --step deliver --concurrency 4
  manage.py pgflow_worker --queue thread_processing --flow support_v1 --flow support_v2
  manage.py pgflow_worker --flow process_order --concurrency 20 --batch-size 20
  manage.py pgflow_worker --flow process_order --shutdown-timeout 120

exit codes: 0 stopped by a signal after draining; 1 could not start (unknown flow, database not
migrated, changed flow definition); 2 bad arguments; 128 + signal number after a second signal
"""

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--flow",
            action="append",
            help="slug of the flow whose queue to work; repeat it with --queue for several routed flows",
        )
        parser.add_argument(
            "--tasks",
            action="store_true",
            help="run Django tasks (TASKS backends of pgflow_django.tasks.PgflowTaskBackend) on --queue "
            "(default: 'default', or the backends' only queue)",
        )
        parser.add_argument(
            "--queue",
            help="a shared queue of the routed flows given with --flow: the worker runs every step their "
            "persisted routes send there",
        )
        parser.add_argument(
            "--step",
            help="for a step-queued flow: the one step whose private queue to work (required there, "
            "refused for a plain flow)",
        )
        parser.add_argument(
            "--concurrency", type=positive_int, help="handler threads (default: PGFLOW WORKER_CONCURRENCY)"
        )
        parser.add_argument(
            "--batch-size",
            type=positive_int,
            help="messages read per claim, at most (default: PGFLOW WORKER_BATCH_SIZE)",
        )
        parser.add_argument(
            "--poll-interval",
            type=positive_float,
            help="seconds between fallback reads of an idle queue, for lost notifications "
            "(default: PGFLOW WORKER_POLL_INTERVAL)",
        )
        parser.add_argument(
            "--max-poll-seconds",
            type=positive_float,
            help="while notifications arrive, idle fallback reads back off up to this many seconds "
            "(default: PGFLOW WORKER_MAX_POLL_SECONDS)",
        )
        parser.add_argument(
            "--shutdown-timeout",
            type=non_negative_float,
            help="seconds in-flight tasks get to finish after a signal "
            "(default: PGFLOW WORKER_SHUTDOWN_TIMEOUT)",
        )
        parser.add_argument(
            "--heartbeat-seconds",
            type=positive_float,
            help="heartbeat period (default: PGFLOW WORKER_HEARTBEAT_SECONDS)",
        )
        parser.add_argument(
            "--stalled-check-seconds",
            type=positive_float,
            help="period of stalled-task recovery, one worker at a time "
            "(default: PGFLOW STALLED_CHECK_SECONDS)",
        )

    def run(self, *args: Any, **options: Any) -> None:
        from pgflow_django.compiler import FlowMismatch
        from pgflow_django.worker import PreflightError, Worker, WorkerOptions
        from pgflow_django.worker.preflight import resolve_flow

        try:
            if (options["queue"] is not None or options["tasks"]) and options["step"]:
                raise PreflightError(
                    "--step selects a step-queued flow's step; a --queue or --tasks worker takes no --step"
                )
            if bool(options["tasks"]) == bool(options["flow"]):
                raise PreflightError(
                    "pass --flow F (a flow's worker) or --tasks (a Django tasks worker), exactly one of them"
                )
            if options["tasks"]:
                from pgflow_django.worker.tasks import task_flows

                options["queue"], flows = task_flows(options["queue"])
            else:
                flows = [resolve_flow(slug) for slug in options["flow"]]
            flow = flows[0]
            worker_options = WorkerOptions.from_settings(
                flow.slug,
                step_slug=options["step"],
                queue=options["queue"],
                concurrency=options["concurrency"],
                batch_size=options["batch_size"],
                poll_interval=options["poll_interval"],
                max_poll_seconds=options["max_poll_seconds"],
                shutdown_timeout=options["shutdown_timeout"],
                heartbeat_seconds=options["heartbeat_seconds"],
                stalled_check_seconds=options["stalled_check_seconds"],
            )
            worker = Worker(flows, worker_options)
            status = worker.prepare()
        except (PreflightError, FlowMismatch, ValueError) as exc:
            raise CommandError(str(exc)) from None
        logger.info("%s %s", worker.subscription, status)
        code = worker.run()
        if worker.abandoned_handlers:
            # Handler threads still running past the shutdown timeout cannot be joined; their tasks
            # were released, so leave without waiting for them.
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
        if code:
            sys.exit(code)
