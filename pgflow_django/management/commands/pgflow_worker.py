"""``manage.py pgflow_worker --flow F``: run the tasks of one flow until SIGTERM/SIGINT."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import TYPE_CHECKING, Any

from django.core.management.base import CommandError, CommandParser

from pgflow_django.dsl import Flow
from pgflow_django.management.cli import (
    PgflowCommand,
    non_negative_int,
    positive_float,
    positive_int,
    shown_argument,
)
from pgflow_django.worker.logs import LEVELS

if TYPE_CHECKING:
    from pgflow_django.metrics import MetricsServer
    from pgflow_django.worker import QueueWorker

logger = logging.getLogger("pgflow_django.worker")


def port_number(text: str) -> int:
    if not (text.isascii() and text.isdigit()) or int(text) > 65535:
        raise argparse.ArgumentTypeError(
            f"expected a port number from 0 to 65535, got {shown_argument(text)}"
        )
    return int(text)


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
        "A worker holds at most --concurrency + 3 database connections per queue. Defaults come from\n"
        "settings.PGFLOW (WORKER_* keys). It logs to stderr unless the project routes the pgflow_django\n"
        "logger itself (LOGGING): --log-level, or -v 0 (warnings), 1 (info), 2 (debug)."
    )
    examples = """
  manage.py pgflow_worker --flow process_order
  manage.py pgflow_worker --flow support_steps --step deliver --concurrency 4
  manage.py pgflow_worker --queue thread_processing \\
      --flow support_v1 --flow support_v2
  manage.py pgflow_worker --flow process_order --concurrency 20 --batch-size 20
  manage.py pgflow_worker --flow process_order --shutdown-timeout 120
  manage.py pgflow_worker --tasks --queue '*' --exclude-queue bulk \\
      --max-tasks 1000
  manage.py pgflow_worker --flow process_order --until-empty --log-level warning
  manage.py pgflow_worker --flow process_order --metrics-port 9108

exit codes: 0 stopped by a signal after draining, or after --max-tasks / --until-empty; 1 could not
start (unknown flow, database not PostgreSQL or not migrated, changed flow definition); 2 bad
arguments; 128 + signal number after a second signal
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
            "persisted routes send there; '*' serves every queue (of the task backends with --tasks, of "
            "the routed flows' routes otherwise), one claim loop per queue",
        )
        parser.add_argument(
            "--exclude-queue",
            action="append",
            default=[],
            metavar="QUEUE",
            help="with --queue '*': leave this queue out (repeatable)",
        )
        parser.add_argument(
            "--max-tasks",
            type=positive_int,
            help="exit 0 once this many tasks were claimed and finished (for memory hygiene, like "
            "Celery's --max-tasks-per-child); the process claims no more than that",
        )
        parser.add_argument(
            "--until-empty",
            action="store_true",
            help="exit 0 once nothing is runnable: a read finds no message and no task is in flight "
            "(delayed retries and run_after in the future are left for later); for cron and CI",
        )
        parser.add_argument(
            "--log-level",
            choices=LEVELS,
            type=str.lower,
            help="level of the pgflow_django logger (default: from -v: 0 warning, 1 info, 2 debug)",
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
            "--prefetch",
            type=non_negative_int,
            help="tasks held while every step's handlers are short (under 5 ms), beyond --concurrency "
            "and --batch-size; 0 holds one per thread (default: PGFLOW WORKER_PREFETCH, off when "
            "--concurrency or --batch-size is given)",
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
            "--metrics-port",
            type=port_number,
            help="serve Prometheus /metrics, /healthz and /readyz on this port (0: any free port, logged); "
            "needs pgflow-django[metrics] (default: PGFLOW WORKER_METRICS_PORT, off)",
        )
        parser.add_argument(
            "--metrics-host",
            help="address of the metrics port (default: PGFLOW WORKER_METRICS_HOST, 0.0.0.0)",
        )
        parser.add_argument(
            "--stalled-check-seconds",
            type=positive_float,
            help="period of stalled-task recovery, one worker at a time "
            "(default: PGFLOW STALLED_CHECK_SECONDS)",
        )
        parser.add_argument(
            "--listen-url",
            metavar="URL",
            help="a libpq URL of a direct session (not through a transaction pooler) for LISTEN "
            "(default: PGFLOW LISTEN_DATABASE's alias, else the worker's database; none, so polling "
            "alone, when PGFLOW POOLER is 'transaction')",
        )
        parser.add_argument(
            "--no-scheduler",
            action="store_true",
            help="do not fire due schedules (by default every worker fires them, one at a time; "
            "see manage.py pgflow_scheduler)",
        )

    def run(self, *args: Any, **options: Any) -> None:
        from pgflow_django.compiler import FlowMismatch
        from pgflow_django.pooler import require_announced_pooler
        from pgflow_django.schedules.sync import sync_schedules_at_start
        from pgflow_django.worker import PreflightError, QueueWorker, WorkerOptions
        from pgflow_django.worker.group import WorkerGroup
        from pgflow_django.worker.logs import configure

        configure(options["verbosity"], options["log_level"])
        require_announced_pooler(self.using)  # else prepared statements fail deep in the claim loop
        try:
            subscriptions = self._subscriptions(options)
            workers: list[QueueWorker] = []
            for queue, flows in subscriptions:
                worker_options = WorkerOptions.from_settings(
                    step_slug=options["step"],
                    queue=queue,
                    concurrency=options["concurrency"],
                    batch_size=options["batch_size"],
                    prefetch=options["prefetch"],
                    poll_interval=options["poll_interval"],
                    max_poll_seconds=options["max_poll_seconds"],
                    shutdown_timeout=options["shutdown_timeout"],
                    heartbeat_seconds=options["heartbeat_seconds"],
                    stalled_check_seconds=options["stalled_check_seconds"],
                    metrics_port=options["metrics_port"],
                    metrics_host=options["metrics_host"],
                    max_tasks=options["max_tasks"],
                    until_empty=options["until_empty"] or None,
                    scheduler=False if options["no_scheduler"] else None,
                    using=self.using,
                    listen_url=options["listen_url"],
                )
                worker = QueueWorker(flows, worker_options)
                status = worker.prepare()
                logger.info("%s %s", worker.subscription, status)
                workers.append(worker)
        except (PreflightError, FlowMismatch, ValueError) as exc:
            raise CommandError(str(exc)) from None
        sync_schedules_at_start(workers[0].options.using)
        server = self._exporter(workers)
        runner: QueueWorker | WorkerGroup = workers[0] if len(workers) == 1 else WorkerGroup(workers)
        try:
            code = runner.run()
        finally:
            if server is not None:
                server.stop()
        if runner.abandoned_handlers:
            # Handler threads still running past the shutdown timeout cannot be joined; their tasks
            # were released, so leave without waiting for them.
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
        if code:
            sys.exit(code)

    def _exporter(self, workers: list[QueueWorker]) -> MetricsServer | None:
        """The process's metrics port, when asked for: one for all its claim loops."""
        from pgflow_django.metrics import MetricsUnavailable
        from pgflow_django.worker.exporter import start_exporter

        options = workers[0].options
        if options.metrics_port is None:
            return None
        try:
            return start_exporter(workers, options.metrics_port, options.metrics_host)
        except MetricsUnavailable as exc:
            raise CommandError(str(exc)) from None
        except OSError as exc:
            raise CommandError(
                f"cannot serve metrics on {options.metrics_host}:{options.metrics_port}: {exc.strerror}; "
                "choose another --metrics-port"
            ) from None

    def _subscriptions(self, options: dict[str, Any]) -> list[tuple[str | None, list[Flow]]]:
        """(queue, flows) for each claim loop: one, or one per queue with ``--queue '*'``."""
        from pgflow_django.dsl import RoutedFlow
        from pgflow_django.task_flows import ALL_QUEUES, task_flows, task_queues
        from pgflow_django.worker import PreflightError
        from pgflow_django.worker.preflight import resolve_flow

        queue = options["queue"]
        if (queue is not None or options["tasks"]) and options["step"]:
            raise PreflightError(
                "--step selects a step-queued flow's step; a --queue or --tasks worker takes no --step"
            )
        if bool(options["tasks"]) == bool(options["flow"]):
            raise PreflightError(
                "pass --flow F (a flow's worker) or --tasks (a Django tasks worker), exactly one of them"
            )
        if options["exclude_queue"] and queue != ALL_QUEUES:
            raise PreflightError("--exclude-queue narrows --queue '*'; pass --queue '*' with it")
        if options["tasks"]:
            if queue == ALL_QUEUES:
                return list(task_queues(options["exclude_queue"], self.using))
            chosen, flows = task_flows(queue, self.using)
            return [(chosen, flows)]
        flows = [resolve_flow(slug) for slug in options["flow"]]
        if queue != ALL_QUEUES:
            return [(queue, flows)]
        routed = [flow for flow in flows if isinstance(flow, RoutedFlow)]
        if len(routed) != len(flows):
            plain = next(flow.slug for flow in flows if not isinstance(flow, RoutedFlow))
            raise PreflightError(
                f"--queue '*' serves the shared queues of routed flows; flow {plain!r} is not routed "
                f"(run it with --flow {plain} alone)"
            )
        names = sorted({name for flow in routed for name in flow.queues})
        unknown = sorted(set(options["exclude_queue"]) - set(names))
        if unknown:
            raise PreflightError(
                f"--exclude-queue {', '.join(unknown)}: not a queue of these flows ({', '.join(names)})"
            )
        chosen_names = [name for name in names if name not in options["exclude_queue"]]
        if not chosen_names:
            raise PreflightError("--exclude-queue leaves no queue to serve")
        return [(name, [flow for flow in routed if name in flow.queues]) for name in chosen_names]
