"""``manage.py pgflow_start FLOW --input JSON``: start one run, and optionally wait for it."""

from __future__ import annotations

import contextlib
import time
import uuid
from typing import Any

from django.core.management.base import CommandError, CommandParser
from rich.console import Group
from rich.live import Live

from pgflow_django.flows.dsl import Flow
from pgflow_django.flows.registry import get_flows
from pgflow_django.management.cli import (
    PgflowCommand,
    add_format_argument,
    idempotency_key,
    interrupted_as,
    load_json_argument,
    positive_float,
    printable,
    priority,
    run_id,
)
from pgflow_django.management.progress import (
    error_summary,
    format_seconds,
    json_text,
    run_dict,
    run_title,
    steps_table,
)
from pgflow_django.runs.client import RunView, get_run, start_flow
from pgflow_django.runs.coverage import run_unserved_steps, worker_commands
from pgflow_django.schedules.report import task_path_of

TIMED_OUT = 3
"""Exit code when --wait gives up while the run is still going."""
POLL_SECONDS = 0.2
WORKER_HINT_SECONDS = 5.0
"""How long --wait lets a run wait on tasks no live worker would claim before it names the worker."""
WORKER_CHECK_SECONDS = 1.0


class Command(PgflowCommand):
    help = (
        "Start a run of a compiled flow.\n\n"
        "Prints the run id. With --wait it follows the run (a live table of its steps on a terminal)\n"
        "until it completes or fails, then prints its steps and output."
    )
    examples = """
  manage.py pgflow_start process_order --input '{"order_id": 42}'
  manage.py pgflow_start process_order --input @order.json --wait
  manage.py pgflow_start process_order --input '{"order_id": 43}' --priority 50
  echo '[1, 2, 3]' | manage.py pgflow_start squares --input - --wait \\
      --timeout 60 --format json
  # the run id alone, for scripts
  RUN=$(manage.py pgflow_start process_order --input '{}')

exit codes: 0 started (with --wait: completed); 1 the run failed, or an error (unknown flow: the
known ones are listed, with the closest match); 2 bad arguments (also an --input that is not
readable JSON); 3 --timeout passed before the run finished (it keeps running); 130 Ctrl-C
"""

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("flow", metavar="FLOW", help="slug of a compiled flow")
        parser.add_argument(
            "--input",
            required=True,
            metavar="JSON",
            help="the run input: a JSON document, @path to read a file, or - to read standard input",
        )
        chosen = parser.add_mutually_exclusive_group()
        chosen.add_argument(
            "--run-id", type=run_id, metavar="UUID", help="choose the run id (default: random)"
        )
        chosen.add_argument(
            "--idempotency-key",
            type=idempotency_key,
            metavar="KEY",
            help="print the run an earlier start of this flow with KEY made instead of starting another",
        )
        parser.add_argument(
            "--priority",
            type=priority,
            metavar="N",
            help="claim priority from -100 to 100, higher first (default: the steps' and the flow's own)",
        )
        parser.add_argument("--wait", action="store_true", help="wait until the run completes or fails")
        parser.add_argument(
            "--timeout",
            type=positive_float,
            metavar="SECONDS",
            help="with --wait, give up after this many seconds (exit 3; the run goes on); default: no limit",
        )
        add_format_argument(parser)

    def run(self, *args: Any, **options: Any) -> None:
        if options["timeout"] is not None and not options["wait"]:
            raise CommandError("--timeout only applies with --wait")
        flow_input = load_json_argument(options["input"])
        refuse_task_path(options["flow"])
        flow: Flow | str = get_flows().get(options["flow"]) or options["flow"]
        started = start_flow(
            flow,
            flow_input,
            run_id=options["run_id"],
            idempotency_key=options["idempotency_key"],
            priority=options["priority"],
            using=self.using,
        )
        as_json = options["format"] == "json"
        if not options["wait"]:
            if as_json:
                self.write_json({"run_id": str(started), "flow_slug": options["flow"], "status": "started"})
            else:
                self.stdout.write(str(started))
            return
        with interrupted_as(f"stopped waiting; run {started} continues (follow it: pgflow_runs {started})"):
            view = self._wait(
                started,
                options["timeout"],
                no_color=options["no_color"],
                task_path=task_path_of(flow_input),
                hint=options["verbosity"] > 0,
            )
        self._report(view, as_json=as_json, verbosity=options["verbosity"], no_color=options["no_color"])
        if not view.is_terminal:
            raise CommandError(
                f"run {started} is still {view.status} after {format_seconds(options['timeout'])}; it keeps "
                f"running (follow it: pgflow_runs {started})",
                returncode=TIMED_OUT,
            )
        if view.status == "failed":
            reason = error_summary(view.error_message) or "no error message"
            raise CommandError(f"run {started} failed: {reason}")

    def _wait(
        self, key: uuid.UUID, timeout: float | None, *, no_color: bool, task_path: str | None, hint: bool
    ) -> RunView:
        """Poll the run; on a terminal, redraw its step table in place (on stderr, keeping stdout clean).

        Once the run has waited ``WORKER_HINT_SECONDS`` on tasks no live worker would claim, say once,
        on stderr, which worker to start."""
        started = time.monotonic()
        deadline = None if timeout is None else started + timeout
        next_check = None if not hint else started + WORKER_HINT_SECONDS
        console = self.console(stderr=True, no_color=no_color)
        view = get_run(key, using=self.using)
        with contextlib.ExitStack() as stack:
            live = None
            if console.is_terminal:
                live = stack.enter_context(
                    Live(_live(view), console=console, transient=True, auto_refresh=False)
                )
            while not view.is_terminal:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    break
                time.sleep(POLL_SECONDS if left is None else min(POLL_SECONDS, left))
                view = get_run(key, using=self.using)
                if live is not None:
                    live.update(_live(view), refresh=True)
                if next_check is not None and time.monotonic() >= next_check and not view.is_terminal:
                    line = _no_worker_line(view, task_path, self.using)
                    next_check = None if line else time.monotonic() + WORKER_CHECK_SECONDS
                    if line and live is not None:  # above the live table, wrapped between words
                        live.console.print(line, style="yellow")
                    elif line:
                        self.stderr.write(line)
        return view

    def _report(self, view: RunView, *, as_json: bool, verbosity: int, no_color: bool) -> None:
        if as_json:
            self.write_json(run_dict(view))
            return
        console = self.console(no_color=no_color)
        if verbosity > 0:
            console.print(run_title(view))
            console.print(steps_table(view))
        if view.status == "completed":
            if verbosity > 0:
                console.print("output:")
            console.print(json_text(view.output), soft_wrap=True)


def _no_worker_line(view: RunView, task_path: str | None, using: str) -> str | None:
    """One line naming the worker to start when the run waits on tasks no live worker would claim."""
    steps = run_unserved_steps(view.run_id, using=using)
    if not steps:
        return None
    commands = "  and  ".join(worker_commands(steps, task_path=task_path))
    flow = printable(view.flow_slug)
    if steps[0].queue_mode == "step":
        names = ", ".join(printable(step.step_slug) for step in steps)
        return f"no worker is serving step(s) {names} of flow {flow}: start one with  {commands}"
    return f"no worker is serving flow {flow}: start one with  {commands}"


def _live(view: RunView) -> Group:
    return Group(run_title(view), steps_table(view))


def refuse_task_path(name: str) -> None:
    """A ``@task`` function's dotted path is not a flow: say how to enqueue it instead."""
    from django.core.exceptions import ImproperlyConfigured
    from django.utils.module_loading import import_string

    if "." not in name:
        return
    try:
        from pgflow_django.tasks.framework import tasks_api

        found = import_string(name)
    except (ImportError, ImproperlyConfigured):
        return
    if isinstance(found, tasks_api.Task):
        raise CommandError(
            f"{name} is a @task, not a flow: enqueue it from Python ({name}.enqueue(...)); "
            "pgflow_start starts flows"
        )
