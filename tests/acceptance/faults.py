"""Shared tools of the fault scenarios (issue 8, item 2): counts that grow under ``PGFLOW_CHAOS=full``
(``make chaos``), ledger-flow workers, and a small raw-psycopg view of one database (the test database
or a private cluster) with the waits, back-dating and ledger checks every scenario ends with.

Time is simulated: a claim is made "older than its recovery deadline" by back-dating ``started_at``,
never by sleeping through the effective timeout + 30 s.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from typing import Any

import psycopg
import pytest

from tests import ledger
from tests.support.db import scalar, tuples
from tests.workers import Spawner, WorkerProcess, wait_until

CHAOS = os.environ.get("PGFLOW_CHAOS") == "full"
"""``make chaos`` sets PGFLOW_CHAOS=full: the same scenarios run with their larger counts."""

FAST = (
    "--poll-interval",
    "0.1",
    "--max-poll-seconds",
    "0.2",
    "--heartbeat-seconds",
    "0.5",
    "--stalled-check-seconds",
    "0.2",
)
"""Worker options for scenarios: quick polls, heartbeats and stalled-task recovery passes."""

RECOVERY_AGE = 10 + 30 + 1
"""Seconds to back-date a claim of a ledger flow (timeout 10) past its recovery deadline (timeout + 30)."""

WORKER_ROLES = ("pgflow_worker supervisor", "pgflow_worker completer", "pgflow_worker listener")


def scale(ci: int, full: int) -> int:
    """A scenario's count: bounded for CI, larger under ``make chaos``."""
    return full if CHAOS else ci


class LedgerSpawner(Spawner):
    """Workers with ``tests/ledger_settings.py``, so the reliability flows are registered."""

    def __call__(self, flow: str, *args: str, ready: bool = True) -> WorkerProcess:
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("DJANGO_SETTINGS_MODULE", ledger.SETTINGS_MODULE)
            return super().__call__(flow, *args, ready=ready)

    def many(self, count: int, flow: str, *args: str) -> list[WorkerProcess]:
        """Start ``count`` workers at once, then wait for each (start-up dominates otherwise)."""
        started = [self(flow, *args, ready=False) for _ in range(count)]
        return [worker.wait_ready(60) for worker in started]


class Db:
    """One autocommit connection to the scenario's database, and the queries scenarios share."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.conn: psycopg.Connection[Any] = psycopg.connect(url, autocommit=True)

    def close(self) -> None:
        self.conn.close()

    def rows(self, query: str, params: Any = None) -> list[tuple[Any, ...]]:
        return tuples(query, params, on=self.conn)

    def val(self, query: str, params: Any = None) -> Any:
        return scalar(query, params, on=self.conn)

    def start(self, flow: str, inputs: list[Any]) -> list[str]:
        """Start one run per input (one statement), returning their ids."""
        return [
            str(row[0])
            for row in self.rows(
                "select run_id from pgflow.start_flows(%s, %s::jsonb)", [flow, json.dumps(inputs)]
            )
        ]

    def unfinished(self, flows: Iterable[str]) -> int:
        return int(
            self.val(
                "select count(*) from pgflow.runs where flow_slug = any(%s) and status = 'started'",
                [list(flows)],
            )
        )

    def wait_finished(self, flows: Iterable[str], timeout: float) -> None:
        slugs = list(flows)
        wait_until(lambda: self.unfinished(slugs) == 0, timeout, f"every run of {slugs} to finish", 0.2)

    def run_statuses(self, run_ids: list[str]) -> dict[str, str]:
        found = self.rows(
            "select run_id::text, status from pgflow.runs where run_id = any(%s::uuid[])", [run_ids]
        )
        return dict((str(run_id), str(status)) for run_id, status in found)

    def task_count(self, run_ids: list[str], status: str) -> int:
        return int(
            self.val(
                "select count(*) from pgflow.step_tasks where run_id = any(%s::uuid[]) and status = %s",
                [run_ids, status],
            )
        )

    def executions(self, run_ids: list[str], attempt: int | None = None) -> int:
        """Handler calls recorded by the execution ledger (of one attempt number, if given)."""
        return int(
            self.val(
                "select count(*) from public.ledger_execution where run_id = any(%s::uuid[]) "
                "and (%s::int is null or attempt = %s::int)",
                [run_ids, attempt, attempt],
            )
        )

    def effects(self, run_ids: list[str]) -> list[tuple[int, int]]:
        """(attempt, worker pid) of each committed effect."""
        return [
            (int(attempt), int(pid))
            for attempt, pid in self.rows(
                "select attempt, worker_pid from public.ledger_effect where run_id = any(%s::uuid[]) "
                "order by step_slug, task_index",
                [run_ids],
            )
        ]

    def backdate(self, run_ids: list[str], seconds: float) -> int:
        """Make the started claims of these runs ``seconds`` old (simulated time)."""
        return int(
            self.val(
                "with t as (update pgflow.step_tasks set started_at = now() - make_interval(secs => %s) "
                "where run_id = any(%s::uuid[]) and status = 'started' returning 1) select count(*) from t",
                [seconds, run_ids],
            )
        )

    def backdate_lost_claims(self, before: Any) -> int:
        """Claims started before ``before`` and still started are lost (their handlers take
        milliseconds): make them old enough for stalled-task recovery instead of waiting 40 s."""
        return int(
            self.val(
                "with t as (update pgflow.step_tasks set started_at = now() - make_interval(secs => %s) "
                "where status = 'started' and started_at < %s returning 1) select count(*) from t",
                [RECOVERY_AGE, before],
            )
        )

    def now(self) -> Any:
        return self.val("select clock_timestamp()")

    def terminate(self, application_names: Iterable[str] = WORKER_ROLES, pids: Iterable[int] = ()) -> int:
        """pg_terminate_backend of this database's worker connections by role name (and given pids)."""
        return int(
            self.val(
                "select count(*) filter (where pg_terminate_backend(pid)) from pg_stat_activity "
                "where datname = current_database() and pid <> pg_backend_pid() "
                "and (application_name = any(%s) or pid = any(%s))",
                [list(application_names), list(pids)],
            )
        )

    def backends(self, application_name: str) -> set[int]:
        return {
            int(row[0])
            for row in self.rows(
                "select pid from pg_stat_activity "
                "where datname = current_database() and application_name = %s",
                [application_name],
            )
        }

    def check(self, *exactly_once: str) -> None:
        """The closing check of every scenario: the engine's invariants, then each flow's ledgers."""
        with self.conn.cursor() as cursor:
            ledger.assert_invariants(cursor)
            for flow in exactly_once:
                ledger.assert_exactly_once(cursor, flow)


class Rig:
    """A scenario's database view and worker spawner on one database. A shared rig's spawner belongs to
    the module (its tests reuse the workers, ``spawn.reused``): it keeps the flows those workers serve
    and prunes the finished runs instead."""

    def __init__(self, url: str, spawn: LedgerSpawner, *, shared: bool = False) -> None:
        self.db = Db(url)
        self.spawn = spawn
        self.shared = shared
        self._clean()

    def _clean(self) -> None:
        with self.db.conn.cursor() as cursor:
            ledger.install_ledger(cursor)
            if self.shared:
                ledger.prune_finished_runs(cursor)
            else:
                ledger.reset_flows(cursor)

    def close(self) -> None:
        if not self.shared:
            self.spawn.stop_all()
        self._clean()
        self.db.close()


def wait_log(worker: WorkerProcess, text: str, count: int = 1, timeout: float = 30) -> None:
    """Wait until the worker's log holds ``text`` at least ``count`` times."""
    wait_until(
        lambda: worker.log().count(text) >= count, timeout, f"{count} x {text!r} in the log of {worker.flow}"
    )


def alive(*workers: WorkerProcess) -> None:
    """Each worker is still the process it was: it rode through the fault without a restart."""
    for worker in workers:
        assert worker.process.poll() is None, f"worker {worker.pid} exited:\n{worker.log()[-4000:]}"
