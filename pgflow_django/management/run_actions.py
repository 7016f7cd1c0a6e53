"""What the commands that act on runs share.

``flows_named`` reads ``--flow``: every version of a compiled flow (a version's stored slug names that
one), or the flows of a Django task given by its function path; ``pgflow_runs`` lists by it too.

``RunActionCommand`` is ``pgflow_retry`` and ``pgflow_run_now``: the runs named by id, or chosen by
``--flow`` (and what the command filters by) once the count and the runs are shown and confirmed (a
terminal asks; anything else needs ``--yes``); then one line per run, each through the same Python call
as the admin's action, in its own transaction, and exit 1 when any run was not acted on. ``--dry-run``
with run ids makes the same call and rolls it back: the same checks, refusals and counts, by the one
SQL function, and nothing changes (its wake-ups are sent only at commit).
"""

from __future__ import annotations

import sys
import textwrap
import uuid
from argparse import ArgumentTypeError
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar, Final

from django.core.management.base import CommandError, CommandParser
from django.db import connections, transaction
from django.db.models import Q

from pgflow_django.flows.slugs import InvalidSlug, validate_flow_slug, version_of
from pgflow_django.flows.task_names import task_flows
from pgflow_django.management.cli import (
    USAGE_ERROR,
    PgflowCommand,
    interrupted_as,
    one_line,
    printable,
    run_id,
)
from pgflow_django.management.layout import Column, FitTable, local_time
from pgflow_django.models import Flow
from pgflow_django.runs.client import RunNotFound, flow_not_found
from pgflow_django.suggest import known_and_closest

SHOWN_RUNS: Final = 20
"""At most this many chosen runs are listed before the question; the count covers them all."""


def flows_named(name: str, *, using: str) -> list[str]:
    """The stored slugs ``--flow NAME`` names: every version of a compiled flow (one version by its
    stored slug, ``orders___v2``), or every flow of a Django task given by its function path
    (``myapp.tasks.send_welcome``, as ``pgflow_runs`` shows it). An unknown name is a usage error that
    lists the known ones."""
    with connections[using].cursor() as cursor:
        tasks = task_flows(cursor)
    if "." in name:
        found = [flow.flow_slug for flow in tasks if flow.task_path == name]
        if found:
            return found
        known = sorted({flow.task_path for flow in tasks if flow.task_path})
        listed, hint = known_and_closest(name, known, most=20)
        raise CommandError(
            f"--flow: no task {name!r} has runs (tasks: {listed}){hint}", returncode=USAGE_ERROR
        )
    try:
        validate_flow_slug(version_of(name), "--flow")
    except InvalidSlug as exc:
        raise CommandError(str(exc), returncode=USAGE_ERROR) from None
    versions = list(
        Flow.objects.using(using)
        .filter(Q(version_of=name) | Q(flow_slug=name))
        .values_list("flow_slug", flat=True)
    )
    if not versions:
        compiled = list(Flow.objects.using(using).values_list("version_of", flat=True).distinct())
        message = flow_not_found(name, compiled, [flow.flow_slug for flow in tasks])
        raise CommandError(f"--flow: {message}", returncode=USAGE_ERROR)
    return versions


def _run_ids(given: Sequence[str | uuid.UUID]) -> list[uuid.UUID]:
    """The RUN_IDs as UUIDs (``call_command`` may pass them so), or the usage error argparse gives."""
    try:
        return [key if isinstance(key, uuid.UUID) else run_id(key) for key in given]
    except ArgumentTypeError as exc:
        raise CommandError(f"argument RUN_ID: {exc}", returncode=USAGE_ERROR) from None


@dataclass(frozen=True)
class ChosenRun:
    """A run ``--flow`` chose, with the time the listing shows (when it failed, or until when its work
    waits)."""

    run_id: uuid.UUID
    flow_slug: str
    at: datetime | None


class RunActionCommand(PgflowCommand):
    """A command that does one thing to runs: to those named by id, or to those ``--flow`` chooses."""

    verb: ClassVar[str]
    """What it does, as a command: ``retry``, ``run now``."""
    plan: ClassVar[str]
    """What it will do to the chosen runs, after their count: ``to retry from where they failed``."""
    question: ClassVar[str]
    """The question before it changes the chosen runs, with ``{count}``."""
    chosen: ClassVar[str]
    """Which runs ``--flow`` chooses, for the count: ``failed run(s)``."""
    at_header: ClassVar[str]
    """The header of the time shown for each chosen run: ``FAILED``, ``WAITS UNTIL``."""
    refused: ClassVar[type[RuntimeError]]
    """What the call raises for a run it does not act on (its status): one line that says why."""

    stealth_options = ("stdin",)

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "run_ids",
            nargs="*",
            metavar="RUN_ID",
            help="the id of a run; several may be given",
        )
        parser.add_argument(
            "--flow",
            metavar="FLOW",
            help=f"the {self.chosen} of this flow, every version (a Django task: its function path), "
            "shown before anything changes",
        )
        self.add_filters(parser)
        parser.add_argument("--yes", action="store_true", help="with --flow: do not ask for confirmation")
        parser.add_argument(
            "--dry-run",
            action="store_true",
            help="change nothing: show the runs --flow chooses, or what it would do to each RUN_ID "
            "(and what it would refuse, exiting as it would)",
        )

    def add_filters(self, parser: CommandParser) -> None:
        """The options that narrow ``--flow``'s choice (none by default)."""

    def filters_given(self, options: dict[str, Any]) -> list[str]:
        """The filter options given, which only apply with ``--flow``."""
        return []

    def choose(self, flows: list[str], options: dict[str, Any]) -> list[ChosenRun]:
        """The runs of ``flows`` (stored slugs) to act on, oldest first."""
        raise NotImplementedError

    def describe_choice(self, name: str, options: dict[str, Any]) -> str:
        """The chosen runs, after their count: ``failed run(s) of flow 'orders' (since ...)``."""
        return f"{self.chosen} of flow {printable(name)!r}"

    def call(self, run_id: uuid.UUID) -> int:
        """Do it to one run (the admin action's call): how many tasks or messages it changed;
        ``RunNotFound``, or ``refused`` with the reason."""
        raise NotImplementedError

    def said(self, run_id: uuid.UUID, count: int, *, dry_run: bool) -> str:
        """The line that says what ``call`` did (or, in a dry run, would do) to one run."""
        raise NotImplementedError

    def act(self, run_id: uuid.UUID) -> str:
        return self.said(run_id, self.call(run_id), dry_run=False)

    def preview(self, run_id: uuid.UUID) -> str:
        """``act`` in a transaction that is rolled back (``--dry-run``)."""
        with transaction.atomic(using=self.using):
            count = self.call(run_id)
            transaction.set_rollback(True, using=self.using)
        return self.said(run_id, count, dry_run=True)

    def check_arguments(self, options: dict[str, Any]) -> None:
        """The run ids are read once argparse is done: an option another command has (``pgflow_run_now
        --failed-since 1h``) is then an unrecognized argument, not a value taken for a RUN_ID."""
        _run_ids(options["run_ids"])

    def run(self, *args: Any, **options: Any) -> None:
        ids = list(dict.fromkeys(_run_ids(options["run_ids"])))
        name: str | None = options["flow"]
        if ids and name is not None:
            raise CommandError("give RUN_IDs or --flow FLOW, not both", returncode=USAGE_ERROR)
        if name is None:
            filters = self.filters_given(options)
            if ids and filters:
                raise CommandError(
                    f"{', '.join(filters)} only narrows --flow; leave it out with RUN_IDs",
                    returncode=USAGE_ERROR,
                )
            if ids and options["yes"]:
                raise CommandError("--yes confirms --flow; leave it out with RUN_IDs", returncode=USAGE_ERROR)
            needs = filters + (["--yes"] if options["yes"] else [])
            if needs:
                verb = "needs" if len(needs) == 1 else "need"
                raise CommandError(f"{' and '.join(needs)} {verb} --flow FLOW", returncode=USAGE_ERROR)
            if not ids:
                raise CommandError(
                    f"give the id of a run to {self.verb}, or --flow FLOW", returncode=USAGE_ERROR
                )
        if name is not None:
            ids = self._chosen(name, options)
        if not ids:
            return
        if options["dry_run"]:
            self._act_on(ids, self.preview, dry_run=True)
        else:
            self._act_on(ids, self.act)

    def _chosen(self, name: str, options: dict[str, Any]) -> list[uuid.UUID]:
        runs = self.choose(flows_named(name, using=self.using), options)
        what = self.describe_choice(name, options)
        if not runs:
            self._say(f"no {what}: nothing to {self.verb}")
            return []
        self._say(f"{len(runs)} {what}, {self.plan}:")
        self._list(runs)
        if options["dry_run"]:
            self.stdout.write(f"nothing changed (--dry-run); without it, {len(runs)} run(s) would change")
            return []
        if not options["yes"]:
            self._confirm(len(runs), options.get("stdin") or sys.stdin)
        return [run.run_id for run in runs]

    def _say(self, line: str) -> None:
        """A sentence, wrapped at the terminal's width (80 columns when piped)."""
        self.stdout.write(textwrap.fill(line, self.console().width, break_long_words=False))

    def _list(self, runs: Sequence[ChosenRun]) -> None:
        table = FitTable(
            Column("RUN", title=True, no_wrap=True),
            Column("FLOW", label="flow"),
            Column(self.at_header, label=self.at_header.lower(), no_wrap=True),
            lined=False,
        )
        for run in runs[:SHOWN_RUNS]:
            table.add_row(str(run.run_id), run.flow_slug, local_time(run.at))
        self.console().print(table)
        if len(runs) > SHOWN_RUNS:
            self.stdout.write(f"... and {len(runs) - SHOWN_RUNS} more")

    def _confirm(self, count: int, stdin: Any) -> None:
        if not stdin.isatty():
            raise CommandError(
                f"refusing to change {count} run(s) without confirmation: standard input is not a "
                "terminal; pass --yes to go ahead"
            )
        self.stdout.write(f"{self.question.format(count=count)} [y/N] ", ending="")
        self.stdout.flush()
        with interrupted_as("interrupted; no run was changed"):
            answer = stdin.readline()
        if answer.strip().lower() not in ("y", "yes"):
            raise CommandError("not confirmed; no run was changed")

    def _act_on(
        self, ids: list[uuid.UUID], call: Callable[[uuid.UUID], str], *, dry_run: bool = False
    ) -> None:
        """One line per run on stdout, or on stderr for a run not changed; exit 1 if any was not. A dry
        run (``call`` is ``preview``) says the same of what it would do, then that nothing changed."""
        if len(ids) == 1:
            try:
                line = call(ids[0])
            except self.refused as exc:
                raise CommandError(one_line(exc)) from None
            self.stdout.write(line)
            if dry_run:
                self.stdout.write("nothing changed (--dry-run)")
            return
        failed = 0
        for key in ids:
            try:
                line = call(key)
            except (RunNotFound, self.refused) as exc:
                failed += 1
                self.stderr.write(one_line(exc))
                continue
            self.stdout.write(line)
        if dry_run:
            self.stdout.write("nothing changed (--dry-run)")
        if failed:
            changed = "would not be changed" if dry_run else "were not changed"
            raise CommandError(f"{failed} of {len(ids)} runs {changed} (see above)")
