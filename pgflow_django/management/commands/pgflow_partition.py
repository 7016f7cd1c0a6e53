"""``manage.py pgflow_partition``: partition the run history by time (opt-in), or show how it is."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError, CommandParser

from pgflow_django.management.cli import PgflowCommand, positive_int
from pgflow_django.runs.operations import (
    default_partition_runs,
    history_partitioning,
    partition_archives,
    partition_history,
)


class Command(PgflowCommand):
    help = (
        "Partition pgflow.runs, step_states and step_tasks by run id, one partition per --interval-days\n"
        "of run start times, so pgflow_prune drops whole partitions instead of deleting rows. No row is\n"
        "copied: the current tables become the default partitions, which keep the runs made before\n"
        "(and the runs whose ids are not time-ordered: idempotency keys, chosen run ids). Without --yes\n"
        "it prints the statements it would run and changes nothing; with --yes it runs them in one\n"
        "transaction (a short exclusive lock on the three tables). Workers keep --ahead future\n"
        "partitions ready. The PGMQ archives of pgflow's queues are partitioned by archive time on the\n"
        "same intervals (--archives does it for a history partitioned before they could be). There is\n"
        "no way back short of restoring a dump: try it on a copy first."
    )
    examples = """
  manage.py pgflow_partition                          the plan, nothing changed
  manage.py pgflow_partition --interval-days 7 --yes  weekly partitions, applied
  manage.py pgflow_partition --status                 how it is partitioned
  manage.py pgflow_partition --archives --yes         the queue archives, later

exit codes: 0 done (or plan printed); 1 already partitioned or another error; 2 bad arguments
"""

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--interval-days",
            type=positive_int,
            default=1,
            metavar="DAYS",
            help="days of run starts per partition, 1 to 31 (default 1); pruning drops whole partitions",
        )
        parser.add_argument(
            "--ahead",
            type=positive_int,
            default=3,
            metavar="N",
            help="future partitions kept ready, 1 to 60 (default 3)",
        )
        parser.add_argument(
            "--yes", action="store_true", help="run the statements (otherwise only print them)"
        )
        parser.add_argument("--status", action="store_true", help="show the partitioning and change nothing")
        parser.add_argument(
            "--archives",
            action="store_true",
            help="partition the queue archives of a history partitioned before they could be",
        )

    def run(self, *args: Any, **options: Any) -> None:
        current = history_partitioning(using=self.using)
        if options["status"]:
            if current is None:
                self.stdout.write("the history is not partitioned (pgflow_partition prints the plan)")
            else:
                self.stdout.write(
                    f"partitioned: {current.partition_interval_days} day(s) per partition, "
                    f"{current.partitions} partition(s) besides the default one, {current.ahead} kept ahead; "
                    f"{default_partition_runs(using=self.using)} run(s) in the default partition"
                )
                self.stdout.write(
                    f"queue archives: {current.partitioned_archives} of {current.engine_archives} partitioned"
                    if current.archives
                    else "queue archives: not partitioned (pgflow_partition --archives prints the plan)"
                )
            return
        if options["archives"]:
            if current is None:
                raise CommandError(
                    "the history is not partitioned: run pgflow_partition without --archives "
                    "(it partitions the queue archives too)"
                )
            if current.archives:
                raise CommandError("the queue archives are already partitioned: nothing to do (see --status)")
            self._partition_archives(
                apply=options["yes"], no_color=options["no_color"], verbosity=options["verbosity"]
            )
            return
        if current is not None:
            raise CommandError(
                f"the history is already partitioned ({current.partition_interval_days} day(s) "
                "per partition): nothing to do (see --status)"
            )
        apply: bool = options["yes"]
        with self.working("partitioning the history" if apply else "planning", no_color=options["no_color"]):
            statements = partition_history(
                options["interval_days"], options["ahead"], apply=apply, using=self.using
            )
        self._print(statements, apply=apply, verbosity=options["verbosity"])

    def _partition_archives(self, *, apply: bool, no_color: bool, verbosity: int) -> None:
        with self.working("partitioning the queue archives" if apply else "planning", no_color=no_color):
            statements = partition_archives(apply=apply, using=self.using)
        self._print(statements, apply=apply, verbosity=verbosity)

    def _print(self, statements: list[str], *, apply: bool, verbosity: int) -> None:
        for statement in statements:
            self.stdout.write(statement.rstrip() + ";")
        if verbosity > 0:
            self.stdout.write(
                f"-- done: {len(statements)} statement(s) run"
                if apply
                else f"-- nothing changed: {len(statements)} statement(s) above; run again with --yes"
            )
