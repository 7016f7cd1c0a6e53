"""``manage.py pgflow_compile``: compile or verify the registered flows, for deploy pipelines.

It calls ``compiler.compile_flow``, the code path a worker runs at startup, so a deploy that passes
here cannot have its workers refuse to start on a changed definition.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any

from django.core.management.base import CommandError, CommandParser
from django.db import transaction
from rich.progress import Progress

from pgflow_django.compiler import CompileResult, FlowMismatch, compile_flow
from pgflow_django.dsl import Flow
from pgflow_django.management.cli import PgflowCommand
from pgflow_django.registry import get_flow, get_flows


@dataclass(frozen=True)
class Outcome:
    flow_slug: str
    status: str
    """compiled | verified | recompiled | mismatch, and with --check: missing."""
    differences: tuple[str, ...] = ()
    options_updated: tuple[str, ...] = ()

    @property
    def failed(self) -> bool:
        return self.status in {"mismatch", "missing"}

    def as_dict(self) -> dict[str, Any]:
        return {
            "flow_slug": self.flow_slug,
            "status": self.status,
            "differences": list(self.differences),
            "options_updated": list(self.options_updated),
        }


class Command(PgflowCommand):
    help = (
        "Compile the registered flows into the database, or verify them with --check.\n\n"
        "A new flow is compiled; a known flow with the same shape is verified and its runtime options\n"
        "(max_attempts, base_delay, timeout, start_delay) are updated in place. A flow whose shape changed\n"
        "is a mismatch: nothing is changed and the command exits 1, unless recompiling is allowed\n"
        "(--allow-recompile, or PGFLOW['ALLOW_RECOMPILE'], which defaults to settings.DEBUG): then the\n"
        "flow and all its runs are deleted and it is compiled again. This is the same code path the\n"
        "worker runs at startup."
    )
    examples = """
  manage.py pgflow_compile                      compile every registered flow
  manage.py pgflow_compile process_order        compile one flow
  manage.py pgflow_compile --check              verify only (CI, before deploying); never writes
  manage.py pgflow_compile --format json

exit codes: 0 all compiled or verified; 1 a flow differs from the database (or, with --check,
is not compiled yet) or another error; 2 bad arguments
"""

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("flows", nargs="*", metavar="FLOW", help="flow slugs (default: all registered)")
        parser.add_argument(
            "--check",
            action="store_true",
            help="verify only: report missing or changed flows and exit 1; never creates or updates anything",
        )
        parser.add_argument(
            "--allow-recompile",
            action=argparse.BooleanOptionalAction,
            default=None,
            help="on a changed shape, delete the flow with its runs and compile it again "
            "(--no-allow-recompile refuses; default: PGFLOW['ALLOW_RECOMPILE'], else settings.DEBUG)",
        )
        parser.add_argument("--format", choices=["text", "json"], default="text", help="output format")

    def run(self, *args: Any, **options: Any) -> None:
        check: bool = options["check"]
        allow_recompile: bool | None = options["allow_recompile"]
        if check and allow_recompile:
            raise CommandError(
                "--check never changes the database; it cannot be combined with --allow-recompile"
            )
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
        outcomes = self._compile_all(
            flows, check=check, allow_recompile=allow_recompile, no_color=options["no_color"]
        )
        if as_json:
            self.write_json([outcome.as_dict() for outcome in outcomes])
        elif options["verbosity"] > 0:
            for outcome in outcomes:
                self._print_outcome(outcome, check=check)
        failed = [outcome for outcome in outcomes if outcome.failed]
        if failed:
            raise CommandError(self._failure_summary(failed, len(outcomes), check=check))

    def _selected(self, slugs: list[str]) -> list[Flow]:
        if not slugs:
            return list(get_flows().values())
        return [get_flow(slug) for slug in dict.fromkeys(slugs)]

    def _compile_all(
        self, flows: list[Flow], *, check: bool, allow_recompile: bool | None, no_color: bool
    ) -> list[Outcome]:
        console = self.console(stderr=True, no_color=no_color)
        with Progress(console=console, transient=True, disable=not console.is_terminal) as progress:
            task = progress.add_task("checking" if check else "compiling", total=len(flows))
            outcomes = []
            for flow in flows:
                progress.update(task, description=f"{'checking' if check else 'compiling'} {flow.slug}")
                outcomes.append(self._check(flow) if check else self._compile(flow, allow_recompile))
                progress.advance(task)
        return outcomes

    def _compile(self, flow: Flow, allow_recompile: bool | None) -> Outcome:
        try:
            result = compile_flow(flow, allow_recompile=allow_recompile)
        except FlowMismatch as exc:
            return Outcome(flow.slug, "mismatch", differences=exc.differences)
        return _outcome(result)

    def _check(self, flow: Flow) -> Outcome:
        """Run the real compiler, then roll its transaction back: the answer without the writes."""
        try:
            with transaction.atomic():
                result = compile_flow(flow, allow_recompile=False)
                transaction.set_rollback(True)
        except FlowMismatch as exc:
            return Outcome(flow.slug, "mismatch", differences=exc.differences)
        if result.status == "compiled":
            return Outcome(flow.slug, "missing")
        return _outcome(result)

    def _print_outcome(self, outcome: Outcome, *, check: bool) -> None:
        label = {"missing": "not compiled"}.get(outcome.status, outcome.status)
        stream = self.stderr if outcome.failed else self.stdout
        style = self.style.ERROR if outcome.failed else self.style.SUCCESS
        stream.write(f"{style(f'{label:<13}')}{outcome.flow_slug}")
        verb = "differs from the database" if check else "updated"
        for change in outcome.options_updated:
            stream.write(f"  option {verb}: {change}")
        for difference in outcome.differences:
            stream.write(f"  - {difference}")

    @staticmethod
    def _failure_summary(failed: list[Outcome], total: int, *, check: bool) -> str:
        mismatched = [outcome.flow_slug for outcome in failed if outcome.status == "mismatch"]
        missing = [outcome.flow_slug for outcome in failed if outcome.status == "missing"]
        parts = []
        if mismatched:
            fix = (
                "give a changed flow a new slug (flow.copy(slug=...))"
                if check
                else "give a changed flow a new slug (flow.copy(slug=...)), or pass --allow-recompile "
                "to delete it with its runs and compile it again"
            )
            parts.append(
                f"{len(mismatched)} of {total} flows differ from the database "
                f"({', '.join(mismatched)}); {fix}"
            )
        if missing:
            parts.append(
                f"{len(missing)} of {total} flows are not compiled yet ({', '.join(missing)}); "
                "run pgflow_compile without --check"
            )
        return "; ".join(parts)


def _outcome(result: CompileResult) -> Outcome:
    return Outcome(
        result.flow_slug,
        result.status,
        differences=result.differences,
        options_updated=result.options_updated,
    )
