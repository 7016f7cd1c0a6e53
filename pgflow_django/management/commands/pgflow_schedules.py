"""``manage.py pgflow_schedules``: list schedules, show one with its recent ticks, pause, resume, trigger."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Final

from django.core.management.base import CommandError, CommandParser
from django.utils import timezone
from rich.table import Table
from rich.text import Text

from pgflow_django.management.cli import PgflowCommand, add_format_argument, load_json_argument, printable
from pgflow_django.management.layout import Column, FitTable
from pgflow_django.management.progress import status_text
from pgflow_django.schedules.cron import InvalidSchedule
from pgflow_django.schedules.pg_cron import JOB_NAME, PgCronUnavailable, sync_pg_cron_job
from pgflow_django.schedules.report import (
    WorkerGap,
    find_schedule,
    last_run_status,
    next_fire_times,
    run_statuses,
    schedule_dict,
    state_of,
    worker_gaps,
)
from pgflow_django.schedules.store import (
    ScheduleDeclared,
    ScheduleNotFound,
    ScheduleView,
    list_schedules,
    pause_schedule,
    recent_ticks,
    resume_schedule,
    trigger_now,
)

ACTIONS: Final = ("list", "show", "pause", "resume", "trigger", "pg-cron")
SHOWN_TICKS: Final = 10
STATE_WIDTH: Final = 16
"""A pause note is not wrapped narrower than this: below, the list becomes one record per schedule."""


class Command(PgflowCommand):
    help = (
        "List the schedules (next and last fire, the last run's status, paused and why), show one with\n"
        "its coming fire times and recent ticks, pause or resume one, or trigger one now (a run outside\n"
        "its ticks, recorded in its ledger as 'manual'). Declared and runtime schedules alike; a declared\n"
        "schedule stays paused across deploys until resumed. Times are shown in TIME_ZONE; JSON has UTC."
    )
    examples = """
  manage.py pgflow_schedules                 every schedule
  manage.py pgflow_schedules --format json
  # coming fire times and the latest ticks
  manage.py pgflow_schedules show nightly-report
  manage.py pgflow_schedules pause nightly-report --reason "vendor API down"
  # ticks missed meanwhile do not fire
  manage.py pgflow_schedules resume nightly-report
  # prints the new run's id
  manage.py pgflow_schedules trigger nightly-report
  manage.py pgflow_schedules trigger nightly-report \\
      --input '{"day": "2026-01-05"}'
  # make the pg_cron job follow PGFLOW["SCHEDULER"]
  manage.py pgflow_schedules pg-cron

exit codes: 0 done; 1 no such schedule (the closest name is suggested), or another error; 2 bad arguments
"""

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "action", nargs="?", choices=ACTIONS, default="list", help="what to do (default: list)"
        )
        parser.add_argument("name", nargs="?", metavar="NAME", help="the schedule (all but list and pg-cron)")
        parser.add_argument("--reason", metavar="TEXT", help="with pause: a note stored with the pause")
        parser.add_argument(
            "--input",
            metavar="JSON",
            help="with trigger: the run input instead of the stored one (JSON, - for stdin, @file)",
        )
        add_format_argument(parser)

    def run(self, *args: Any, **options: Any) -> None:
        action: str = options["action"]
        name: str | None = options["name"]
        self._refuse_misplaced(action, name, options)
        try:
            if action == "list":
                self._list(options)
            elif action == "pg-cron":
                self._pg_cron(options)
            elif action == "show":
                self._show(find_schedule(_named(name), using=self.using), options)
            elif action == "pause":
                self._pause(_named(name), options)
            elif action == "resume":
                self._resume(_named(name), options)
            else:
                self._trigger(_named(name), options)
        except (ScheduleNotFound, ScheduleDeclared, InvalidSchedule, PgCronUnavailable) as exc:
            raise CommandError(str(exc.args[0]) if exc.args else str(exc)) from None

    def _refuse_misplaced(self, action: str, name: str | None, options: dict[str, Any]) -> None:
        if action in ("list", "pg-cron") and name is not None:
            raise CommandError(f"{action} takes no NAME; to see one schedule: pgflow_schedules show {name}")
        if action not in ("list", "pg-cron") and name is None:
            raise CommandError(f"{action} needs the schedule's NAME: pgflow_schedules {action} NAME")
        if options["reason"] is not None and action != "pause":
            raise CommandError("--reason only applies to pause")
        if options["input"] is not None and action != "trigger":
            raise CommandError("--input only applies to trigger")

    def _list(self, options: dict[str, Any]) -> None:
        views = list_schedules(using=self.using)
        statuses = run_statuses((view.last_run_id for view in views), using=self.using)
        gaps = _gaps(views, self.using)
        if options["format"] == "json":
            self.write_json([schedule_dict(view, statuses, gaps) for view in views])
            return
        console = self.console(no_color=options["no_color"])
        if not views:
            console.print("no schedules: declare one with schedule(...) in flows.py, then pgflow_compile")
            return
        table = FitTable(
            Column(("name", "cron"), title=True),
            Column(("flow", "time zone")),
            Column("next\nfire", no_wrap=True),
            Column("last\nfire", no_wrap=True),
            Column(("last run", "state"), min_width=STATE_WIDTH),
        )
        for view in views:
            status = last_run_status(view, statuses)
            state = Text(printable(state_of(view)), style="" if view.active else "yellow")
            gap = gaps.get(view.name)
            warning = () if gap is None else (Text(gap.warning, style="bold red"),)
            planning = (Text("cannot plan", style="red"),) if view.plan_error else ()
            table.add_row(
                (printable(view.name), printable(view.cron)),
                (printable(view.flow_slug), printable(view.timezone)),
                _stacked(view.next_fire_at if view.active else None),
                _stacked(view.last_fired_at),
                (status_text(status) if status else Text("-"), state, *planning, *warning),
                end_section=True,
            )
        console.print(table)
        console.print(f"times in {timezone.get_current_timezone_name()}", style="dim")

    def _show(self, view: ScheduleView, options: dict[str, Any]) -> None:
        ticks = recent_ticks(view.name, limit=SHOWN_TICKS, using=self.using)
        statuses = run_statuses([view.last_run_id, *(tick.run_id for tick in ticks)], using=self.using)
        gap = _gaps([view], self.using).get(view.name)
        if options["format"] == "json":
            self.write_json(
                {
                    **schedule_dict(view, statuses, {} if gap is None else {view.name: gap}),
                    "recent_ticks": [
                        {
                            "tick": tick.tick,
                            "kind": tick.kind,
                            "run_id": str(tick.run_id),
                            "run_status": statuses.get(tick.run_id, "pruned"),
                            "fired_at": tick.fired_at,
                        }
                        for tick in ticks
                    ],
                }
            )
            return
        console = self.console(no_color=options["no_color"])
        console.print(f"schedule {printable(view.name)} ({view.origin}): {printable(state_of(view))}")
        fields = Table.grid(padding=(0, 0, 0, 2), pad_edge=True)
        fields.add_column(no_wrap=True)
        fields.add_column(overflow="fold")
        fields.add_row("flow", printable(view.flow_slug))
        fields.add_row("cron", f"{printable(view.cron)} in {printable(view.timezone)}")
        fields.add_row(
            "catch-up",
            f"{view.catch_up} (at most {view.max_catch_up}), jitter {view.jitter} s, "
            f"{view.missed_ticks} missed",
        )
        if view.input_callable:
            fields.add_row("input", f"from {printable(view.input_callable)}")
        if view.plan_error:
            fields.add_row("planning", Text(f"failed: {printable(view.plan_error)}", style="red"))
        if view.last_error:
            fields.add_row("error", Text(printable(view.last_error), style="red"))
        coming = (
            [_when(fire) for fire in next_fire_times(view.name, view.upcoming, view.jitter, using=self.using)]
            if view.active
            else []
        )
        fields.add_row("next", ", ".join(coming) or "-")
        if gap is not None:
            fields.add_row("workers", Text(gap.detail, style="red"))
            for command in gap.commands:
                fields.add_row("start", command)
        elif view.active:
            fields.add_row("workers", "a live worker runs each step of its flow")
        console.print(fields)
        if not ticks:
            console.print("no ticks fired yet")
            return
        table = FitTable(
            Column("tick", title=True, no_wrap=True),
            Column("kind", no_wrap=True),
            Column("run", no_wrap=True),
            Column("status", no_wrap=True),
            title="recent ticks",
        )
        for tick in ticks:
            table.add_row(
                _when(tick.tick),
                tick.kind,
                str(tick.run_id),
                status_text(statuses.get(tick.run_id, "pruned")),
            )
        console.print(table)
        console.print(f"times in {timezone.get_current_timezone_name()}", style="dim")

    def _pg_cron(self, options: dict[str, Any]) -> None:
        change = sync_pg_cron_job(using=self.using)
        if options["format"] == "json":
            self.write_json({"job": JOB_NAME, "change": change})
        elif change == "absent":
            self.stdout.write(
                f"no pg_cron job {JOB_NAME} (PGFLOW['SCHEDULER'] is not 'pg_cron'); nothing changed"
            )
        elif change == "removed":
            self.stdout.write(f"removed the pg_cron job {JOB_NAME}: PGFLOW['SCHEDULER'] is not 'pg_cron'")
        else:
            self.stdout.write(f"pg_cron job {JOB_NAME} {change}: it calls pgflow.fire_due_schedules()")

    def _pause(self, name: str, options: dict[str, Any]) -> None:
        before = find_schedule(name, using=self.using)
        view = pause_schedule(name, detail=options["reason"], using=self.using)
        if options["format"] == "json":
            self.write_json(schedule_dict(view, run_statuses([view.last_run_id], using=self.using)))
        elif before.paused_reason is not None:
            undo = (
                "declare it again, or delete it"
                if before.paused_reason == "removed_from_code"
                else f"resume with pgflow_schedules resume {name}"
            )
            self.stdout.write(f"schedule {name} was already {state_of(before)}; kept it ({undo})")
        else:
            self.stdout.write(
                f"paused schedule {name}: it fires nothing until pgflow_schedules resume {name}"
            )

    def _resume(self, name: str, options: dict[str, Any]) -> None:
        before = find_schedule(name, using=self.using)
        view = resume_schedule(name, using=self.using)
        if options["format"] == "json":
            self.write_json(schedule_dict(view, run_statuses([view.last_run_id], using=self.using)))
        elif before.paused_reason is None:
            self.stdout.write(f"schedule {name} is not paused; nothing changed")
        else:
            self.stdout.write(
                f"resumed schedule {name}: next fire {_when(view.next_fire_at)} "
                f"({timezone.get_current_timezone_name()}); ticks missed while paused do not fire"
            )

    def _trigger(self, name: str, options: dict[str, Any]) -> None:
        find_schedule(name, using=self.using)
        if options["input"] is None:
            run_id = trigger_now(name, using=self.using)
        else:
            run_id = trigger_now(name, input=load_json_argument(options["input"]), using=self.using)
        if options["format"] == "json":
            self.write_json({"name": name, "run_id": str(run_id)})
        else:
            self.stdout.write(f"triggered schedule {name}: run {run_id}")


def _gaps(views: list[ScheduleView], using: str) -> dict[str, WorkerGap]:
    """The active schedules whose flow has a step no live worker runs."""
    return worker_gaps(
        ((view.name, view.flow_slug, view.input) for view in views if view.active), using=using
    )


def _named(name: str | None) -> str:
    assert name is not None  # _refuse_misplaced saw to it
    return name


def _stacked(moment: datetime | None) -> str:
    """A time as two short lines (date, then time of day), so the list fits 80 columns."""
    return "-" if moment is None else _when(moment).replace(" ", "\n")


def _when(moment: datetime | None) -> str:
    return "-" if moment is None else timezone.localtime(moment).strftime("%m-%d %H:%M:%S")
