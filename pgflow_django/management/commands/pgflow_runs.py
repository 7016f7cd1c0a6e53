"""``manage.py pgflow_runs``: list recent runs, show one run with its steps and tasks, or watch them live."""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping, Sequence
from contextlib import ExitStack
from typing import Any

from django.core.management.base import CommandError, CommandParser
from django.db.models import Case, DateTimeField, F, When
from django.db.models.fields.json import KT
from django.db.models.functions import Now
from rich.live import Live
from rich.text import Text

from pgflow_django.flows.task_names import run_flow_name, run_task_path
from pgflow_django.management.cli import (
    USAGE_ERROR,
    PgflowCommand,
    add_format_argument,
    positive_float,
    positive_int,
    printable,
    run_id,
)
from pgflow_django.management.layout import Column, FitTable, local_time
from pgflow_django.management.progress import (
    DELAYED_STYLE,
    NOTE_WIDTH,
    delayed_until,
    error_summary,
    error_traceback,
    format_seconds,
    json_text,
    parent_and_children,
    run_dict,
    run_title,
    status_text,
    steps_table,
)
from pgflow_django.management.run_actions import flows_named
from pgflow_django.management.watch import render, take_snapshot
from pgflow_django.models import Run, StepTask
from pgflow_django.runs.client import RunView, get_run, run_priority

DEFAULT_LIMIT = 20
DEFAULT_INTERVAL = 2.0


class Command(PgflowCommand):
    help = (
        "List runs (newest first), show one run with its step states and tasks, or watch the active "
        "runs and the queue depths live (--watch).\n\n"
        "JSON output carries run ids as strings and PGMQ message ids as decimal strings."
    )
    examples = """
  manage.py pgflow_runs                      the 20 newest runs
  manage.py pgflow_runs --flow process_order --status failed --limit 100
  # a Django task's runs, by its function path (as the list shows them)
  manage.py pgflow_runs --flow myapp.tasks.send_welcome
  # one run: steps, then its tasks with --tasks
  manage.py pgflow_runs 5f1c...-...
  # run, steps and tasks as JSON
  manage.py pgflow_runs 5f1c...-... --format json
  # live view of active runs and queue depths
  manage.py pgflow_runs --watch
  manage.py pgflow_runs --watch --flow process_order --interval 5

With --tasks -v 2, the traceback recorded with each failed task (a Django task's) follows the table.

exit codes: 0 shown (a watch: also when ended by Ctrl-C); 1 no such run, or another error; 2 bad arguments
(also --flow naming no compiled flow)
"""

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "run_id", nargs="?", type=run_id, metavar="RUN_ID", help="show this run in detail"
        )
        parser.add_argument(
            "--flow", metavar="FLOW", help="only runs of this flow (a Django task: its function path)"
        )
        parser.add_argument(
            "--status", choices=["started", "completed", "failed"], help="only runs in this status"
        )
        parser.add_argument(
            "--limit", type=positive_int, metavar="N", help=f"at most N runs (default {DEFAULT_LIMIT})"
        )
        parser.add_argument(
            "--tasks", action="store_true", help="with RUN_ID, also list its tasks (text format)"
        )
        add_format_argument(parser)
        parser.add_argument(
            "--watch",
            action="store_true",
            help="live view of the active runs (step progress) and queue depths until Ctrl-C; redrawn in "
            "place on a terminal (stderr), else one snapshot per interval on stdout",
        )
        parser.add_argument(
            "--interval",
            type=positive_float,
            metavar="S",
            help=f"with --watch, seconds between snapshots (default {DEFAULT_INTERVAL:g})",
        )
        parser.add_argument(
            "--iterations", type=positive_int, metavar="N", help="with --watch, stop after N snapshots"
        )

    def run(self, *args: Any, **options: Any) -> None:
        flows = None if options["flow"] is None else flows_named(options["flow"], using=self.using)
        as_json = options["format"] == "json"
        key: uuid.UUID | None = options["run_id"]
        if options["watch"]:
            if flows is not None and len(flows) > 1 and "." in options["flow"]:
                raise CommandError(
                    f"--watch follows one flow; task {options['flow']} has one per queue: --flow "
                    f"{' or --flow '.join(flows)}",
                    returncode=USAGE_ERROR,
                )
            watched = flows[0] if flows and "." in options["flow"] else options["flow"]
            self._watch(key, as_json, {**options, "flow": watched})
            return
        if options["interval"] is not None or options["iterations"] is not None:
            raise CommandError("--interval and --iterations only apply with --watch")
        if key is None:
            if options["tasks"]:
                raise CommandError("--tasks needs a RUN_ID")
            self._list(flows, options["status"], options["limit"] or DEFAULT_LIMIT, as_json, options)
            return
        given = [name for name in ("flow", "status", "limit") if options[name] is not None]
        if given:
            flags = ", ".join(f"--{name}" for name in given)
            raise CommandError(f"{flags} only filter the list of runs; leave them out when showing run {key}")
        self._show(get_run(key, using=self.using), as_json, options)

    def _watch(self, key: uuid.UUID | None, as_json: bool, options: Any) -> None:
        if key is not None:
            raise CommandError(f"--watch shows every active run; leave out RUN_ID {key} (or drop --watch)")
        conflicting = [
            flag for flag, given in (("--status", options["status"]), ("--tasks", options["tasks"])) if given
        ]
        if as_json:
            conflicting.append("--format json")
        if conflicting:
            raise CommandError(f"--watch cannot be combined with {', '.join(conflicting)}")
        flow: str | None = options["flow"]
        limit: int = options["limit"] or DEFAULT_LIMIT
        interval: float = options["interval"] or DEFAULT_INTERVAL
        iterations: int | None = options["iterations"]
        no_color: bool = options["no_color"]
        live_console = self.console(stderr=True, no_color=no_color)
        out = self.console(no_color=no_color)
        shown = 0
        try:
            with ExitStack() as stack:
                live: Live | None = None
                if live_console.is_terminal:
                    live = stack.enter_context(Live(console=live_console, auto_refresh=False))
                while True:
                    view = render(
                        take_snapshot(flow, limit, using=self.using),
                        flow=flow,
                        interval=interval,
                        limit=limit,
                    )
                    if live is not None:
                        live.update(view, refresh=True)
                    else:
                        if shown:
                            out.print()
                        out.print(view)
                    shown += 1
                    if iterations is not None and shown >= iterations:
                        return
                    time.sleep(interval)
        except KeyboardInterrupt:
            return  # Ctrl-C is how a watch ends: exit 0

    def _list(
        self, flows: list[str] | None, status: str | None, limit: int, as_json: bool, options: Any
    ) -> None:
        runs = Run.objects.using(self.using).annotate(
            task_path=KT("input__task"),
            delayed_until=Case(  # a started run whose delayed start is still ahead
                When(status="started", not_before__gt=Now(), then=F("not_before")),
                default=None,
                output_field=DateTimeField(),
            ),
        )
        if flows:
            runs = runs.filter(flow_id__in=flows)
        if status:
            runs = runs.filter(status=status)
        rows = list(
            runs.order_by("-started_at", "run_id").values(
                "run_id",
                "flow_id",
                "task_path",
                "status",
                "priority",
                "remaining_steps",
                "error_message",
                "started_at",
                "completed_at",
                "failed_at",
                "not_before",
                "delayed_until",
            )[:limit]
        )
        if as_json:
            self.write_json([_run_row(row) for row in rows])
            return
        console = self.console(no_color=options["no_color"])
        if not rows:
            console.print("no runs" + (" matching the filters" if flows or status else ""))
            return
        table = FitTable(
            Column("run id", title=True, no_wrap=True),
            Column("flow", title=True),
            Column("status", no_wrap=True),
            Column("priority", no_wrap=True),
            Column("started"),
            Column("duration"),
            Column("steps left", justify="right"),
            Column("error", min_width=NOTE_WIDTH),
        )
        for row in rows:
            finished = row["completed_at"] or row["failed_at"]
            table.add_row(
                str(row["run_id"]),
                printable(run_flow_name(row["flow_id"], row["task_path"])),
                Text(delayed_until(row["delayed_until"]), style=DELAYED_STYLE)
                if row["delayed_until"]
                else status_text(row["status"]),
                run_priority(row["priority"]),
                local_time(row["started_at"]),
                format_seconds((finished - row["started_at"]).total_seconds()) if finished else "",
                str(row["remaining_steps"]),
                error_summary(row["error_message"]),
            )
        console.print(table)
        if len(rows) == limit:
            console.print(f"showing the newest {limit}; use --limit for more", style="dim")

    def _show(self, view: RunView, as_json: bool, options: Any) -> None:
        tasks = list(
            StepTask.objects.using(self.using)
            .filter(run_id=view.run_id)
            .order_by("step_slug", "task_index")
            .values(
                "step_slug",
                "task_index",
                "status",
                "attempts_count",
                "message_id",
                "error_message",
                "last_worker_id",
                "requeued_count",
                "queued_at",
                "started_at",
                "completed_at",
                "failed_at",
            )
        )
        order = {state.step_slug: state.step_index for state in view.steps}
        tasks.sort(key=lambda task: (order.get(task["step_slug"], 0), task["task_index"]))
        if as_json:
            self.write_json({**run_dict(view), "tasks": [_task_row(task) for task in tasks]})
            return
        console = self.console(no_color=options["no_color"])
        console.print(run_title(view))
        related = parent_and_children(view)
        if related:
            console.print(related, soft_wrap=True)
        console.print(steps_table(view))
        if view.error_message:
            console.print(f"error: {error_summary(view.error_message)}", style="red")
        if view.status == "completed":
            console.print("output:")
            console.print(json_text(view.output), soft_wrap=True)
        if options["tasks"]:
            console.print(_tasks_table(tasks))
            if options["verbosity"] >= 2:
                self._tracebacks(console, tasks)
        elif options["verbosity"] >= 2 and error_traceback(view.error_message):
            console.print(f"traceback:\n{error_traceback(view.error_message)}", soft_wrap=True)

    def _tracebacks(self, console: Any, tasks: Sequence[Mapping[str, Any]]) -> None:
        """Each failed task's recorded traceback, under a line naming the task."""
        for task in tasks:
            trace = error_traceback(task["error_message"])
            if trace:
                console.print(f"traceback of {printable(task['step_slug'])}[{task['task_index']}]:")
                console.print(trace, soft_wrap=True)


def _run_row(row: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "run_id": str(row["run_id"]),
        "flow_slug": row["flow_id"],
        "task": run_task_path(row["flow_id"], row["task_path"]),
        "status": row["status"],
        "priority": row["priority"],
        "remaining_steps": row["remaining_steps"],
        "error_message": row["error_message"],
        "started_at": row["started_at"],
        "completed_at": row["completed_at"],
        "failed_at": row["failed_at"],
        "not_before": row["not_before"],
        "delayed_until": row["delayed_until"],
    }


def _task_row(task: Mapping[str, Any]) -> dict[str, Any]:
    return {
        **task,
        "message_id": None if task["message_id"] is None else str(task["message_id"]),
        "last_worker_id": None if task["last_worker_id"] is None else str(task["last_worker_id"]),
    }


def _tasks_table(tasks: Sequence[Mapping[str, Any]]) -> FitTable:
    table = FitTable(
        Column("step", title=True),
        Column("index", justify="right", no_wrap=True),
        Column("status", no_wrap=True),
        Column("attempts", justify="right", no_wrap=True),
        Column("message id", justify="right", no_wrap=True),
        Column("error", min_width=NOTE_WIDTH),
        title="tasks",
    )
    for task in tasks:
        table.add_row(
            printable(task["step_slug"]),
            str(task["task_index"]),
            status_text(task["status"]),
            str(task["attempts_count"]),
            "" if task["message_id"] is None else str(task["message_id"]),
            error_summary(task["error_message"]),
        )
    return table
