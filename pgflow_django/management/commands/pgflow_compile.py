"""``manage.py pgflow_compile``: compile or verify the registered flows, for deploy pipelines.

It calls ``compiler.compile_flow``, the code path a worker runs at startup, so a deploy that passes
here cannot have its workers refuse to start on a changed definition.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from typing import Any

from django.core.management.base import CommandError, CommandParser
from django.db import transaction
from rich.progress import Progress

from pgflow_django.flows.compiler import CompileResult, FlowMismatch, compile_flow, runs_phrase
from pgflow_django.flows.dsl import Flow
from pgflow_django.flows.registry import get_flow, get_flows
from pgflow_django.management.cli import PgflowCommand, add_format_argument


@dataclass(frozen=True)
class Outcome:
    flow_slug: str
    status: str
    """compiled | verified | versioned | recompiled | mismatch, and with --check: missing."""
    differences: tuple[str, ...] = ()
    options_updated: tuple[str, ...] = ()
    runs: int = 0
    """mismatch: the runs a replacement would delete; recompiled: the runs it deleted."""
    unfinished_runs: int = 0
    message: str = ""
    """mismatch: the one line that says what differs and the ways forward."""

    @property
    def failed(self) -> bool:
        return self.status in {"mismatch", "missing"}

    def as_dict(self) -> dict[str, Any]:
        return {
            "flow_slug": self.flow_slug,
            "status": self.status,
            "differences": list(self.differences),
            "options_updated": list(self.options_updated),
            "runs": self.runs,
            "unfinished_runs": self.unfinished_runs,
        }


class Command(PgflowCommand):
    help = (
        "Compile the registered flows into the database, or verify them with --check.\n\n"
        "A new flow is compiled; a known definition is verified. A changed definition (shape, options or\n"
        "queues) is added as a new version of the flow (shown as 'new version' with its stored slug): runs\n"
        "already started finish on their version, new starts from this code take the new one (see\n"
        "pgflow_versions). Run it as a release step, before code that starts the changed flow is deployed.\n"
        "With PGFLOW['ON_SHAPE_CHANGE'] = 'refuse' a changed shape is a mismatch instead: the differences\n"
        "are listed, nothing is changed and the command exits 1 (runtime options are updated in place).\n"
        "--replace deletes a changed flow with its runs and compiles it again: it shows how many runs it\n"
        "deletes and asks (or takes --yes). This is the same code path the worker runs at startup."
    )
    examples = """
  manage.py pgflow_compile                   compile every registered flow
  manage.py pgflow_compile process_order     compile one flow
  # verify only (CI, before deploying): what would be compiled; never writes
  manage.py pgflow_compile --check
  # replace a changed flow: shows the runs it deletes, asks
  manage.py pgflow_compile orders --replace
  # the same without the question (scripts)
  manage.py pgflow_compile orders --replace --yes
  manage.py pgflow_compile --format json

exit codes: 0 all compiled, verified or replaced; 1 a flow differs from the database (or, with
--check, is not compiled yet), a replacement was not confirmed, or another error; 2 bad arguments
"""
    stealth_options = ("stdin",)

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("flows", nargs="*", metavar="FLOW", help="flow slugs (default: all registered)")
        parser.add_argument(
            "--check",
            action="store_true",
            help="verify only: report new versions, and missing or refused flows (exit 1); never writes",
        )
        parser.add_argument(
            "--replace",
            action="store_true",
            help="replace each named flow whose shape changed: delete it with all its runs and compile it "
            "again, after showing how many runs that deletes and asking (or --yes)",
        )
        parser.add_argument("--yes", action="store_true", help="with --replace: do not ask for confirmation")
        parser.add_argument(
            "--allow-recompile", action=argparse.BooleanOptionalAction, default=None, help=argparse.SUPPRESS
        )
        add_format_argument(parser)

    def run(self, *args: Any, **options: Any) -> None:
        check: bool = options["check"]
        replace: bool = options["replace"]
        if options["allow_recompile"]:
            raise CommandError(
                "--allow-recompile was removed (it deleted every run of a changed flow without showing "
                "them): use manage.py pgflow_compile FLOW --replace"
            )
        if check and replace:
            raise CommandError("--check never changes the database; it cannot be combined with --replace")
        if replace and not options["flows"]:
            raise CommandError(
                "--replace deletes runs: name the flows to replace (manage.py pgflow_compile FLOW --replace)"
            )
        if options["yes"] and not replace:
            raise CommandError("--yes confirms --replace; pass both, or neither")
        flows = self._selected(options["flows"])
        as_json = options["format"] == "json"
        if not flows:
            self.stderr.write(
                "no flows registered: add dotted paths to PGFLOW['FLOWS'] "
                "or define flows in an app's flows.py"
            )
            if as_json:
                self.write_json([])
            return
        outcomes = self._compile_all(flows, check=check, replace=replace, no_color=options["no_color"])
        if replace:
            stdin = options.get("stdin") or sys.stdin
            outcomes = [
                self._replace(flow, outcome, yes=options["yes"], stdin=stdin, no_color=options["no_color"])
                if outcome.status == "mismatch"
                else outcome
                for flow, outcome in zip(flows, outcomes, strict=True)
            ]
        if as_json:
            self.write_json([outcome.as_dict() for outcome in outcomes])
        elif options["verbosity"] > 0:
            for outcome in outcomes:
                self._print_outcome(outcome, check=check)
        failed = [outcome for outcome in outcomes if outcome.failed]
        if failed:
            raise CommandError(self._failure_summary(failed, len(outcomes), check=check))
        if not check and not options["flows"]:
            self._sync_schedules(quiet=as_json or options["verbosity"] == 0)

    def _sync_schedules(self, *, quiet: bool) -> None:
        """Declared schedules follow the code on every full compile (see pgflow_django.schedules.sync)."""
        from pgflow_django.schedules import InvalidSchedule, sync_declared_schedules

        try:
            result = sync_declared_schedules()
        except InvalidSchedule as exc:
            raise CommandError(str(exc)) from None
        if quiet:
            return
        for label, names in (("created", result.created), ("updated", result.updated)):
            for name in names:
                self.stdout.write(f"{self.style.SUCCESS(f'{label:<13}')}schedule {name}")
        for name in result.removed:
            self.stdout.write(f"{'paused':<13}schedule {name} (removed from code)")

    def _selected(self, slugs: list[str]) -> list[Flow]:
        if not slugs:
            return list(get_flows().values())
        return [get_flow(slug) for slug in dict.fromkeys(slugs)]

    def _compile_all(self, flows: list[Flow], *, check: bool, replace: bool, no_color: bool) -> list[Outcome]:
        console = self.console(stderr=True, no_color=no_color)
        with Progress(console=console, transient=True, disable=not console.is_terminal) as progress:
            task = progress.add_task("checking" if check else "compiling", total=len(flows))
            outcomes = []
            for flow in flows:
                progress.update(task, description=f"{'checking' if check else 'compiling'} {flow.slug}")
                # --replace first compiles refusing, so the runs it would delete are counted and shown
                outcomes.append(self._check(flow) if check else self._compile(flow, refuse=replace))
                progress.advance(task)
        return outcomes

    def _compile(self, flow: Flow, *, refuse: bool) -> Outcome:
        try:
            result = compile_flow(flow, on_change="refuse" if refuse else None, using=self.using)
        except FlowMismatch as exc:
            return _mismatch(exc)
        return _outcome(result)

    def _check(self, flow: Flow) -> Outcome:
        """Run the real compiler, then roll its transaction back: the answer without the writes."""
        try:
            with transaction.atomic():
                result = compile_flow(flow, using=self.using)
                transaction.set_rollback(True)
        except FlowMismatch as exc:
            return _mismatch(exc)
        if result.status == "compiled":
            return Outcome(flow.slug, "missing")
        return _outcome(result)

    def _replace(self, flow: Flow, outcome: Outcome, *, yes: bool, stdin: Any, no_color: bool) -> Outcome:
        """Show the diff and what replacing costs, confirm, then replace (unless more runs started since)."""
        slug = flow.slug
        cost = runs_phrase(outcome.runs, outcome.unfinished_runs)
        for difference in outcome.differences:
            self.stderr.write(f"  {difference}")
        self.stderr.write(f"replacing flow {slug!r} {cost}, their tasks and its queue")
        if not yes:
            if not stdin.isatty():
                raise CommandError(
                    f"refusing to replace flow {slug!r} without confirmation: standard input is not a "
                    f"terminal; pass --yes to replace it ({cost})"
                )
            self.stderr.write("Type the flow slug to confirm: ", ending="")
            self.stderr.flush()
            if stdin.readline().strip() != slug:
                raise CommandError(f"not confirmed; flow {slug!r} was not replaced")
        try:
            with self.working(f"replacing flow {slug!r}", no_color=no_color):
                result = compile_flow(
                    flow, on_change="replace", confirmed_runs=outcome.runs, using=self.using
                )
        except FlowMismatch as exc:
            return _mismatch(exc)
        return _outcome(result)

    def _print_outcome(self, outcome: Outcome, *, check: bool) -> None:
        label = {"missing": "not compiled", "recompiled": "replaced", "versioned": "new version"}.get(
            outcome.status, outcome.status
        )
        stream = self.stderr if outcome.failed else self.stdout
        style = self.style.ERROR if outcome.failed else self.style.SUCCESS
        stream.write(f"{style(f'{label:<13}')}{outcome.flow_slug}")
        verb = "differs from the database" if check else "updated"
        for change in outcome.options_updated:
            stream.write(f"  option {verb}: {change}")
        if outcome.status == "recompiled":
            stream.write(f"  deleted {outcome.runs} run(s) ({outcome.unfinished_runs} unfinished)")
        for difference in outcome.differences:
            stream.write(f"  {difference}")
        if outcome.status == "mismatch" and not check:
            stream.write(
                f"  replacing it {runs_phrase(outcome.runs, outcome.unfinished_runs)}: "
                f"manage.py pgflow_compile {outcome.flow_slug} --replace"
            )

    @staticmethod
    def _failure_summary(failed: list[Outcome], total: int, *, check: bool) -> str:
        mismatched = [outcome for outcome in failed if outcome.status == "mismatch"]
        missing = [outcome.flow_slug for outcome in failed if outcome.status == "missing"]
        parts = []
        if len(mismatched) == 1 and not missing:
            return mismatched[0].message
        if mismatched:
            parts.append(
                f"{len(mismatched)} of {total} flows differ from the database "
                f"({', '.join(outcome.flow_slug for outcome in mismatched)}); add each as a new version "
                "(PGFLOW['ON_SHAPE_CHANGE'] = 'version', the default), or replace it with manage.py "
                "pgflow_compile FLOW --replace (it shows the runs it deletes and asks)"
            )
        if missing:
            parts.append(
                f"{len(missing)} of {total} flows are not compiled yet ({', '.join(missing)}); "
                "run pgflow_compile without --check"
            )
        return "; ".join(parts)


def _mismatch(exc: FlowMismatch) -> Outcome:
    return Outcome(
        exc.flow_slug,
        "mismatch",
        differences=exc.differences,
        runs=exc.runs,
        unfinished_runs=exc.unfinished_runs,
        message=str(exc),
    )


def _outcome(result: CompileResult) -> Outcome:
    return Outcome(
        result.flow_slug,
        result.status,
        differences=result.differences,
        options_updated=result.options_updated,
        runs=result.runs,
        unfinished_runs=result.unfinished_runs,
    )
