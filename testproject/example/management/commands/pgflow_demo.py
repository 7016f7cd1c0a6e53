"""``make demo``: migrate, compile, start workers, run a batch of orders, show progress, clean up.

Everything it starts (worker processes) it stops again, also on Ctrl-C or an error. The embedded
PostgreSQL (used when DATABASE_URL is not set) stops by itself when its last user exits.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.core.management import call_command
from django.core.management.base import CommandError, CommandParser
from django.db import connection
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table
from rich.text import Text

from pgflow_django import compile_flow, start_flows
from pgflow_django.management.cli import PgflowCommand, positive_float, positive_int
from testproject.example.demo_flows import demo_orders

MANAGE = Path(__file__).resolve().parents[3] / "manage.py"
WORKER_READY_SECONDS = 30.0
WORKER_STOP_SECONDS = 20.0
WIDTH = 80
"""Columns the demo's output fits in, also when piped (a narrower terminal narrows it further)."""


@dataclass
class Counts:
    runs_completed: int = 0
    runs_failed: int = 0
    tasks: int = 0
    tasks_completed: int = 0
    tasks_retried: int = 0
    gifts: int = 0
    gifts_skipped: int = 0

    @property
    def runs_finished(self) -> int:
        return self.runs_completed + self.runs_failed


class Command(PgflowCommand):
    database_option = False  # the demo migrates and runs on the default database
    help = (
        "Run the example end to end: migrate, compile the demo flow, start worker processes, start a\n"
        "batch of order runs (a map over order lines, a condition for VIP gifts, a charge that fails\n"
        "once and succeeds on retry), show progress, print a summary and stop the workers."
    )
    examples = """
  make demo
  testproject/manage.py pgflow_demo --runs 500 --workers 2 --concurrency 20
"""

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--runs", type=positive_int, default=200, help="orders to run (default 200)")
        parser.add_argument("--workers", type=positive_int, default=2, help="worker processes (default 2)")
        parser.add_argument(
            "--concurrency", type=positive_int, default=10, help="handler threads per worker (default 10)"
        )
        parser.add_argument(
            "--timeout",
            type=positive_float,
            default=90.0,
            help="give up waiting for the runs after this many seconds (default 90)",
        )

    def run(self, *args: Any, **options: Any) -> None:
        console = self.console(no_color=options["no_color"])
        console.width = min(console.width, WIDTH)
        console.rule(Text("pgflow-django demo", style="bold"))  # the console reads no markup
        where = connection.settings_dict
        host = str(where["HOST"] or "")
        place = (
            f"{host}:{where['PORT'] or 5432}" if host and not host.startswith("/") else f"socket in {host}"
        )
        console.print(f"database: {where['NAME']} ({place})")
        with console.status("migrating"):
            call_command("migrate", verbosity=0, interactive=False)
        console.print("migrated")
        result = compile_flow(demo_orders, on_change="replace-if-idle")
        console.print(f"flow {demo_orders.slug}: {result.status}")
        logs = Path(tempfile.mkdtemp(prefix="pgflow-demo-"))
        workers: list[tuple[subprocess.Popen[bytes], Path]] = []
        previous = signal.signal(signal.SIGTERM, _interrupt)
        try:
            self._start_workers(console, workers, logs, options["workers"], options["concurrency"])
            ids = start_flows(demo_orders, _orders(options["runs"]))
            started = time.monotonic()
            counts = self._follow(console, ids, workers, options["timeout"])
            elapsed = time.monotonic() - started
        except KeyboardInterrupt:
            raise CommandError("interrupted; the demo's workers were stopped", returncode=130) from None
        finally:
            self._stop_workers(console, workers)
            signal.signal(signal.SIGTERM, previous)
        self._summary(console, ids, counts, elapsed, options, logs)
        if counts.runs_finished < len(ids):
            raise CommandError(
                f"{len(ids) - counts.runs_finished} runs did not finish within {options['timeout']:.0f} s; "
                f"worker logs: {logs}"
            )
        if counts.runs_failed:
            raise CommandError(
                f"{counts.runs_failed} runs failed; inspect them: manage.py pgflow_runs --status failed"
            )

    def _start_workers(
        self,
        console: Console,
        workers: list[tuple[subprocess.Popen[bytes], Path]],
        logs: Path,
        count: int,
        concurrency: int,
    ) -> None:
        """Appends each process to ``workers`` as soon as it exists, so the caller stops it whatever
        happens next. Each runs in its own session: Ctrl-C reaches only the demo, which then sends
        the workers one SIGTERM (a second signal would make them skip their drain)."""
        since = _db_now()
        for index in range(count):
            log = logs / f"worker-{index + 1}.log"
            with log.open("wb") as out:
                process = subprocess.Popen(
                    [
                        sys.executable,
                        str(MANAGE),
                        "pgflow_worker",
                        "--flow",
                        demo_orders.slug,
                        "--concurrency",
                        str(concurrency),
                    ],
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    env={**os.environ, "PYTHONUNBUFFERED": "1"},
                    start_new_session=True,
                )
            workers.append((process, log))
        with console.status(f"starting {count} worker process(es) for {demo_orders.slug}"):
            deadline = time.monotonic() + WORKER_READY_SECONDS
            while _live_workers(since) < count:
                _check_alive(workers)
                if time.monotonic() > deadline:
                    raise CommandError(
                        f"workers did not register within {WORKER_READY_SECONDS:.0f} s; logs: {logs}"
                    )
                time.sleep(0.1)
        console.print(f"{count} worker(s) ready, {concurrency} handler threads each")

    def _follow(
        self,
        console: Console,
        ids: list[uuid.UUID],
        workers: list[tuple[subprocess.Popen[bytes], Path]],
        timeout: float,
    ) -> Counts:
        deadline = time.monotonic() + timeout
        columns = (
            SpinnerColumn(),
            TextColumn("{task.description:<16}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
        )
        with Progress(*columns, console=console, disable=not console.is_terminal) as progress:
            runs_bar = progress.add_task("runs finished", total=len(ids))
            tasks_bar = progress.add_task("tasks completed", total=None)
            while True:
                counts = _counts(ids)
                progress.update(runs_bar, completed=counts.runs_finished)
                progress.update(tasks_bar, completed=counts.tasks_completed, total=counts.tasks)
                if counts.runs_finished == len(ids) or time.monotonic() > deadline:
                    return counts
                _check_alive(workers)
                time.sleep(0.2)

    def _stop_workers(self, console: Console, workers: list[tuple[subprocess.Popen[bytes], Path]]) -> None:
        for process, _ in workers:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + WORKER_STOP_SECONDS
        for process, log in workers:
            try:
                process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                console.print(f"worker {process.pid} did not stop in time; killing it (log: {log})")
                process.kill()
                process.wait()
        if workers:
            console.print(f"stopped {len(workers)} worker(s)")

    def _summary(
        self, console: Console, ids: list[uuid.UUID], counts: Counts, elapsed: float, options: Any, logs: Path
    ) -> None:
        table = Table(show_header=False, title="summary", title_justify="left")
        table.add_column(style="bold")
        table.add_column()
        table.add_row("runs", f"{len(ids)} ({counts.runs_completed} completed, {counts.runs_failed} failed)")
        table.add_row(
            "tasks",
            f"{counts.tasks_completed} completed; {counts.tasks_retried} retried after a failure "
            "(the charge)",
        )
        table.add_row(
            "condition", f"{counts.gifts} VIP gifts added, {counts.gifts_skipped} skipped (not VIP)"
        )
        table.add_row("elapsed", f"{elapsed:.1f} s from starting the runs to the last one finishing")
        if elapsed > 0:
            table.add_row(
                "throughput",
                f"{counts.tasks_completed / elapsed:,.0f} tasks/s, "
                f"{counts.runs_finished / elapsed:,.1f} runs/s (a retry waits 2 s by design)",
            )
        table.add_row("workers", f"{options['workers']} x pgflow_worker --flow {demo_orders.slug}")
        table.add_row("worker logs", str(logs))
        console.print(table)
        sample = _sample_run(ids)
        if sample is not None:
            console.print("inspect a run that retried:")
            console.print(f"  testproject/manage.py pgflow_runs {sample} --tasks")


def _interrupt(signum: int, frame: object) -> None:
    """SIGTERM to the demo stops it like Ctrl-C, so its workers are stopped too."""
    raise KeyboardInterrupt


def _orders(count: int) -> list[dict[str, Any]]:
    """Deterministic orders of 1-5 lines; about a third are VIP (a gift step runs for them)."""
    rng = random.Random(42)
    return [
        {
            "order_id": number,
            "items": [
                {
                    "sku": f"sku-{rng.randrange(1000)}",
                    "qty": rng.randint(1, 3),
                    "price_cents": rng.randrange(500, 9000),
                }
                for _ in range(rng.randint(1, 5))
            ],
        }
        for number in range(1, count + 1)
    ]


def _db_now() -> Any:
    with connection.cursor() as cursor:
        cursor.execute("select clock_timestamp()")
        return cursor.fetchone()[0]


def _live_workers(since: Any) -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "select count(*) from pgflow.workers "
            "where queue_name = %s and started_at >= %s and stopped_at is null",
            [demo_orders.slug, since],
        )
        return int(cursor.fetchone()[0])


def _check_alive(workers: list[tuple[subprocess.Popen[bytes], Path]]) -> None:
    for process, log in workers:
        if process.poll() is not None:
            tail = "\n".join(log.read_text(errors="replace").splitlines()[-15:])
            raise CommandError(
                f"worker {process.pid} exited with code {process.returncode}; log {log}:\n{tail}"
            )


def _counts(ids: list[uuid.UUID]) -> Counts:
    with connection.cursor() as cursor:
        cursor.execute(
            """
            with runs as (select status from pgflow.runs where run_id = any(%(ids)s)),
                 tasks as (select status, attempts_count from pgflow.step_tasks where run_id = any(%(ids)s)),
                 gifts as (select status from pgflow.step_states
                            where run_id = any(%(ids)s) and step_slug = 'add_gift')
            select (select count(*) from runs where status = 'completed'),
                   (select count(*) from runs where status = 'failed'),
                   (select count(*) from tasks),
                   (select count(*) from tasks where status = 'completed'),
                   (select count(*) from tasks where attempts_count > 1),
                   (select count(*) from gifts where status = 'completed'),
                   (select count(*) from gifts where status = 'skipped')
            """,
            {"ids": ids},
        )
        row = cursor.fetchone()
    return Counts(*(int(value) for value in row))


def _sample_run(ids: list[uuid.UUID]) -> uuid.UUID | None:
    with connection.cursor() as cursor:
        cursor.execute(
            "select run_id from pgflow.step_tasks where run_id = any(%s) and attempts_count > 1 limit 1",
            [ids],
        )
        row = cursor.fetchone()
    return None if row is None else uuid.UUID(str(row[0]))
