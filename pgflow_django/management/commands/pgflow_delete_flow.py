"""``manage.py pgflow_delete_flow FLOW [--version N]``: delete one compiled flow (or one drained version
of it) with all its data and its queues."""

from __future__ import annotations

import sys
from typing import Any

from django.core.management.base import CommandError, CommandParser

from pgflow_django.flows.slugs import version_of
from pgflow_django.management.cli import PgflowCommand
from pgflow_django.runs.operations import FlowSummary, delete_flow, describe_flow
from pgflow_django.runs.versions import delete_version, find_version, flow_versions


class Command(PgflowCommand):
    help = (
        "Delete a compiled flow: its runs, step states, tasks, steps and its PGMQ queues (live messages\n"
        "included); a routed flow's shared queues stay, only its own messages on them are deleted.\n"
        "Runs being started meanwhile are waited for and deleted too. This cannot be undone. Asks for\n"
        "confirmation on a terminal; without a terminal (scripts, CI) it refuses unless --yes is given.\n"
        "Stop the flow's workers first. With --version N, only that version of the flow goes, and only once\n"
        "it is drained (not the newest version, no unfinished run: see pgflow_versions FLOW)."
    )
    examples = """
  manage.py pgflow_delete_flow process_order_v1
  manage.py pgflow_delete_flow process_order_v1 --yes     no question (scripts)
  manage.py pgflow_delete_flow process_order --version 1  a drained version

exit codes: 0 deleted; 1 not confirmed, no such flow, or another error; 2 bad arguments
"""
    stealth_options = ("stdin",)

    def create_parser(self, prog_name: str, subcommand: str, **kwargs: Any) -> CommandParser:
        """``--version N`` names a flow version here, in place of Django's ``--version``."""
        kwargs.setdefault("conflict_handler", "resolve")
        return super().create_parser(prog_name, subcommand, **kwargs)

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("flow", metavar="FLOW", help="slug of the compiled flow to delete")
        parser.add_argument("--yes", action="store_true", help="do not ask for confirmation")
        parser.add_argument(
            "--version",
            metavar="N",
            help="delete only this drained version (its number, name or stored slug; see pgflow_versions)",
        )

    def run(self, *args: Any, **options: Any) -> None:
        slug: str = options["flow"]
        if options["version"] is None and slug != version_of(slug):
            options = {**options, "version": slug}  # a version's stored slug: that version, if drained
        if options["version"] is not None:
            self._delete_version(slug, options)
            return
        versions = flow_versions(slug, using=self.using)
        if len(versions) == 1:
            slug = versions[0].flow_slug  # the flow's one version, stored as slug___vN past the first
        elif slug == versions[0].version_of:
            listed = ", ".join(version.name for version in versions)
            raise CommandError(
                f"flow {slug!r} has {len(versions)} versions ({listed}): delete the drained ones first with "
                f"--version N (manage.py pgflow_versions {slug} shows which are drained)"
            )
        summary = describe_flow(slug, using=self.using)
        if summary.live_workers:
            self.stderr.write(self.style.WARNING(_live_workers_warning(summary)))
        if not options["yes"]:
            self._confirm(summary, options.get("stdin") or sys.stdin)
        with self.working(f"deleting flow {slug!r}", no_color=options["no_color"]):
            deleted = delete_flow(slug, using=self.using)
        if options["verbosity"] > 0:
            self.stdout.write(f"deleted flow {slug!r}: {deleted.runs} run(s) and {deleted.what_goes}")

    def _delete_version(self, slug: str, options: dict[str, Any]) -> None:
        chosen = find_version(flow_versions(slug, using=self.using), options["version"])
        if not options["yes"]:
            self._confirm(
                describe_flow(chosen.flow_slug, using=self.using), options.get("stdin") or sys.stdin
            )
        with self.working(f"deleting {chosen.name} of flow {slug!r}", no_color=options["no_color"]):
            deleted = delete_version(slug, options["version"], using=self.using)
        if options["verbosity"] > 0:
            self.stdout.write(
                f"deleted {chosen.name} of flow {chosen.version_of!r} ({chosen.flow_slug}): {deleted.runs} "
                f"run(s) and {deleted.what_goes}"
            )

    def _confirm(self, summary: FlowSummary, stdin: Any) -> None:
        slug = summary.flow_slug
        if not stdin.isatty():
            raise CommandError(
                f"refusing to delete flow {slug!r} without confirmation: standard input is not a terminal; "
                "pass --yes to delete it"
            )
        active = f", {summary.active_runs} still in progress" if summary.active_runs else ""
        self.stdout.write(
            f"This deletes flow {slug!r} with its {summary.runs} run(s){active}, their tasks and "
            f"{summary.what_goes}."
        )
        self.stdout.write("Type the flow slug to confirm: ", ending="")
        self.stdout.flush()
        answer = stdin.readline()
        if answer.strip() != slug:
            raise CommandError(f"not confirmed; flow {slug!r} was not deleted")


def _live_workers_warning(summary: FlowSummary) -> str:
    slug, count = summary.flow_slug, summary.live_workers
    if not summary.shared_queues:
        return (
            f"warning: {count} live worker(s) serve flow {slug!r}; they will fail once its queue is gone: "
            "stop them first"
        )
    return (
        f"warning: {count} live worker(s) on shared queue(s) {', '.join(summary.shared_queues)} support "
        f"flow {slug!r}; the queues stay and these workers keep running, but find no work of it any more: "
        "restart them without it"
    )
