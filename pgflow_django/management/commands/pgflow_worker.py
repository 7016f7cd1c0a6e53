"""``manage.py pgflow_worker``: run the project's flows and tasks (or the ones selected) until
SIGTERM/SIGINT, in one claim loop."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import TYPE_CHECKING, Any

from django.core.management.base import CommandError, CommandParser

from pgflow_django.management.cli import (
    PgflowCommand,
    non_negative_int,
    positive_float,
    positive_int,
    shown_argument,
)
from pgflow_django.worker.logs import LEVELS

if TYPE_CHECKING:
    from pgflow_django.observability.metrics import MetricsServer
    from pgflow_django.worker import QueueWorker
    from pgflow_django.worker.subscription import Subscription

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
        "Run a worker: check the database, compile or verify its flows (the pgflow_compile code path),\n"
        "register in pgflow.workers, then claim and run their tasks until SIGTERM or SIGINT. With no\n"
        "selection it serves every registered flow (each queue of it: a plain flow's, each step queue of\n"
        "a step-queued flow, each shared queue of a routed flow) and the Django tasks of the\n"
        "PgflowTaskBackends on its --database, all in one claim loop with one --concurrency budget.\n"
        "--flow, --step, --queue and --tasks narrow it; --exclude-flow and --exclude-queue leave some out.\n"
        "On a shared queue, work the worker does not support is left untouched for other workers.\n"
        "The first signal stops polling and lets in-flight tasks finish within --shutdown-timeout\n"
        "(the rest are released); a second one exits at once and leaves them to stalled-task recovery.\n"
        "async def handlers run on one event loop, --async-concurrency of them at once beside the threads.\n"
        "A worker holds at most --concurrency + 3 database connections (+1 for async handlers' ORM calls),\n"
        "however many queues it polls.\n"
        "Defaults come from settings.PGFLOW (WORKER_* keys). It logs to stderr unless the project routes\n"
        "the pgflow_django logger itself (LOGGING): --log-level, or -v 0 (warnings), 1 (info), 2 (debug)."
    )
    examples = """
  manage.py pgflow_worker
  manage.py pgflow_worker --exclude-flow nightly_report --concurrency 16
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
  manage.py pgflow_worker --reload

exit codes: 0 stopped by a signal after draining, or after --max-tasks / --until-empty; 1 could not
start (unknown flow, database not PostgreSQL or not migrated, changed flow definition); 2 bad
arguments; 128 + signal number after a second signal
"""

    def add_arguments(self, parser: CommandParser) -> None:
        add_selection_arguments(parser)
        add_capacity_arguments(parser)
        add_process_arguments(parser)

    def run(self, *args: Any, **options: Any) -> None:
        from pgflow_django.db.pooler import require_announced_pooler
        from pgflow_django.flows.compiler import FlowMismatch
        from pgflow_django.schedules.sync import sync_schedules_at_start
        from pgflow_django.worker import PreflightError, QueueWorker, WorkerOptions
        from pgflow_django.worker.logs import configure
        from pgflow_django.worker.reload import RESTART_CODE, in_reloaded_child, restart_on_change, watch_code

        configure(options["verbosity"], options["log_level"])
        if options["reload"] and not in_reloaded_child():
            sys.exit(restart_on_change())
        require_announced_pooler(self.using)  # else prepared statements fail deep in the claim loop
        try:
            subscriptions = self._subscriptions(options)
            worker_options = WorkerOptions.from_settings(
                step_slug=options["step"],
                queue=None,
                concurrency=options["concurrency"],
                batch_size=options["batch_size"],
                async_concurrency=options["async_concurrency"],
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
            worker = QueueWorker(subscriptions, worker_options)
            status = worker.prepare()
            logger.info("%s %s", worker.subscription, status)
        except (PreflightError, FlowMismatch, ValueError) as exc:
            raise CommandError(str(exc)) from None
        sync_schedules_at_start(worker.options.using)
        server = self._exporter(worker)
        changed: list[str] = []
        if options["reload"]:

            def restart(path: str) -> None:
                logger.info("%s changed: restarting once in-flight tasks finish", path)
                changed.append(path)
                worker.state.request_stop()

            watch_code(restart)
        try:
            code = worker.run()
        finally:
            if server is not None:
                server.stop()
        if changed and not worker.fatal:
            code = RESTART_CODE
        if worker.abandoned_handlers:
            # Handler threads still running past the shutdown timeout cannot be joined; their tasks
            # were released, so leave without waiting for them.
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
        if code:
            sys.exit(code)

    def _exporter(self, worker: QueueWorker) -> MetricsServer | None:
        """The process's metrics port, when asked for."""
        from pgflow_django.observability.metrics import MetricsUnavailable
        from pgflow_django.worker.exporter import start_exporter

        options = worker.options
        if options.metrics_port is None:
            return None
        try:
            return start_exporter([worker], options.metrics_port, options.metrics_host)
        except MetricsUnavailable as exc:
            raise CommandError(str(exc)) from None
        except OSError as exc:
            raise CommandError(
                f"cannot serve metrics on {options.metrics_host}:{options.metrics_port}: {exc.strerror}; "
                "choose another --metrics-port"
            ) from None

    def _subscriptions(self, options: dict[str, Any]) -> list[Subscription]:
        """The queues this worker polls, each with the flows it runs there: everything the project
        defines unless --flow, --tasks or --queue narrow it."""
        from pgflow_django.worker import PreflightError
        from pgflow_django.worker.preflight import resolve_flow
        from pgflow_django.worker.subscription import shared_subscription, subscriptions_for, without_queues
        from pgflow_django.worker.task_flows import ALL_QUEUES, task_flows, task_queues

        queue, step, chosen = options["queue"], options["step"], options["flow"] or []
        if (queue is not None or options["tasks"]) and step:
            raise PreflightError(
                "--step selects a step-queued flow's step; a --queue or --tasks worker takes no --step"
            )
        if step and len(chosen) != 1:
            raise PreflightError("--step selects one step of one step-queued flow: pass exactly one --flow")
        if options["tasks"] and chosen:
            raise PreflightError(
                "pass --flow F (some flows) or --tasks (Django tasks), not both; with neither, the worker "
                "serves every flow and task"
            )
        if options["exclude_flow"] and (chosen or options["tasks"]):
            raise PreflightError("--exclude-flow narrows a worker serving every flow; drop --flow or --tasks")
        excluded_queues = options["exclude_queue"]
        if excluded_queues and queue not in (None, ALL_QUEUES):
            raise PreflightError(
                f"--exclude-queue narrows a worker serving several queues; --queue {queue} serves one"
            )
        if excluded_queues and options["tasks"] and queue is None:
            raise PreflightError(
                "--tasks serves one queue unless --queue '*' is given: pass it with --exclude-queue"
            )
        twice = sorted({slug for slug in chosen if chosen.count(slug) > 1})
        if twice:
            raise PreflightError(f"--flow {twice[0]} is given twice; list each flow once")
        if options["tasks"]:
            if queue == ALL_QUEUES:
                return [
                    shared_subscription(name, flows)
                    for name, flows in task_queues(excluded_queues, self.using)
                ]
            name, flows = task_flows(queue, self.using)
            return [shared_subscription(name, flows)]
        if chosen:
            seen = [resolve_flow(slug) for slug in chosen]
            if queue not in (None, ALL_QUEUES):
                return [shared_subscription(queue, seen)]
            if queue == ALL_QUEUES:
                plain = next((flow.slug for flow in seen if flow.queue_mode != "routed"), None)
                if plain is not None:
                    raise PreflightError(
                        f"--queue '*' serves the shared queues of routed flows; flow {plain!r} is not routed "
                        f"(drop --queue to serve every queue of it)"
                    )
            subscriptions = subscriptions_for(seen, step)
        else:
            subscriptions = self._project(options["exclude_flow"], queue)
        return without_queues(subscriptions, excluded_queues) if excluded_queues else subscriptions

    def _project(self, excluded: list[str], queue: str | None) -> list[Subscription]:
        """Every registered flow (minus ``excluded``) and every task of the PgflowTaskBackends on this
        worker's database; only those on ``queue`` when one is named."""
        from pgflow_django.flows.registry import get_flows
        from pgflow_django.worker import PreflightError
        from pgflow_django.worker.subscription import subscriptions_for
        from pgflow_django.worker.task_flows import ALL_QUEUES, project_task_flows

        flows = get_flows()
        unknown = sorted(set(excluded) - set(flows))
        if unknown:
            raise PreflightError(
                f"--exclude-flow {', '.join(unknown)}: not a registered flow "
                f"(registered: {', '.join(sorted(flows)) or 'none'})"
            )
        subscriptions = subscriptions_for(
            [flow for slug, flow in flows.items() if slug not in excluded],
            shared_flows=project_task_flows(self.using),
        )
        if queue not in (None, ALL_QUEUES):
            subscriptions = [sub for sub in subscriptions if sub.queue == queue]
            if not subscriptions:
                raise PreflightError(f"no registered flow or task uses queue {queue!r}")
        if not subscriptions:
            raise PreflightError(
                "nothing to serve: no registered flow (PGFLOW['FLOWS'] or an installed app's flows.py) and "
                "no @task of a PgflowTaskBackend on this database"
            )
        return subscriptions


def add_selection_arguments(parser: CommandParser) -> None:
    """What the worker serves and when it ends: flows, queues, tasks, steps, limits and logging."""
    parser.add_argument(
        "--flow",
        action="append",
        help="serve only this flow, every queue of it (repeatable); with --queue Q, only the steps "
        "its persisted routes send to Q",
    )
    parser.add_argument(
        "--exclude-flow",
        action="append",
        default=[],
        metavar="FLOW",
        help="leave this registered flow out of a worker serving every flow (repeatable)",
    )
    parser.add_argument(
        "--tasks",
        action="store_true",
        help="serve only Django tasks (TASKS backends of pgflow_django.tasks.PgflowTaskBackend) on "
        "--queue (default: 'default', or the backends' only queue)",
    )
    parser.add_argument(
        "--queue",
        help="serve only this queue: the steps of every served flow routed there (the tasks there, "
        "with --tasks); '*' serves every queue (of the task backends with --tasks)",
    )
    parser.add_argument(
        "--exclude-queue",
        action="append",
        default=[],
        metavar="QUEUE",
        help="leave this queue out (repeatable); not with a single --queue Q",
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


def add_capacity_arguments(parser: CommandParser) -> None:
    """How hard it pushes: threads, batches, prefetch, polling and the drain on stop."""
    parser.add_argument(
        "--concurrency", type=positive_int, help="handler threads (default: PGFLOW WORKER_CONCURRENCY)"
    )
    parser.add_argument(
        "--batch-size",
        type=positive_int,
        help="messages read per claim, at most (default: PGFLOW WORKER_BATCH_SIZE)",
    )
    parser.add_argument(
        "--async-concurrency",
        type=non_negative_int,
        help="async def handlers run at once on the worker's event loop, beside the threads; 0 runs "
        "them on the handler threads (default: PGFLOW WORKER_ASYNC_CONCURRENCY)",
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
        help="seconds in-flight tasks get to finish after a signal (default: PGFLOW WORKER_SHUTDOWN_TIMEOUT)",
    )


def add_process_arguments(parser: CommandParser) -> None:
    """The process around the loop: heartbeat, metrics endpoint, recovery, LISTEN, reload, scheduler."""
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
        help="period of stalled-task recovery, one worker at a time (default: PGFLOW STALLED_CHECK_SECONDS)",
    )
    parser.add_argument(
        "--listen-url",
        metavar="URL",
        help="a libpq URL of a direct session (not through a transaction pooler) for LISTEN "
        "(default: PGFLOW LISTEN_DATABASE's alias, else the worker's database; none, so polling "
        "alone, when PGFLOW POOLER is 'transaction')",
    )
    parser.add_argument(
        "--reload",
        action="store_true",
        help="for development: restart when the project's code changes (Django's autoreloader, as "
        "runserver does), after in-flight tasks finish",
    )
    parser.add_argument(
        "--no-scheduler",
        action="store_true",
        help="do not fire due schedules (by default every worker fires them, one at a time; "
        "see manage.py pgflow_scheduler)",
    )
