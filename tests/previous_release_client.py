"""A worker of the previous release (protocol 1), reduced to its SQL, for the coordinated-upgrade tests.

It speaks that release's full protocol with plain SQL on any DB-API cursor, in the order its worker did:

1. start-up check: every entry point it calls exists and ``pgflow.protocol_version()`` equals 1 (else it
   refuses, before anything else, with the previous release's error lines);
2. start-up compilation through ``pgflow.ensure_flow_compiled(flow_slug, shape, allow_recompile)``;
3. registration in ``pgflow.workers`` (queue name = the flow slug as given);
4. polling: ``pgmq.read`` on the flow's queue, then the 3-argument claim
   ``pgflow.start_tasks(flow_slug, msg_ids, worker_id)``;
5. completion through ``pgflow.complete_tasks(items)``; heartbeats and the stop mark on its workers row.

A worker that was already running when the database was upgraded skips step 1 (it checked at its
start): ``claim`` and ``complete`` may be called directly to play the drain window.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

PROTOCOL_VERSION = 1

REQUIRED_FUNCTIONS: tuple[str, ...] = (
    "pgflow.protocol_version()",
    "pgflow.ensure_flow_compiled(text,jsonb,boolean)",
    "pgflow.start_tasks(text,bigint[],uuid)",
    "pgflow.complete_tasks(jsonb)",
    "pgflow.complete_task(uuid,text,integer,integer,jsonb)",
    "pgflow.fail_task(uuid,text,integer,integer,text,integer)",
    "pgflow.requeue_stalled_tasks()",
    "pgflow.release_tasks(jsonb)",
    "pgmq.read(text,integer,integer,jsonb)",
)
"""The previous release's worker probed exactly these before starting."""


class IncompatibleDatabase(Exception):
    """The previous release's worker refused to start; the message says what to do."""


@dataclass(frozen=True)
class LegacyTask:
    """One row of the 3-argument claim (``pgflow.step_task_record``)."""

    flow_slug: str
    run_id: uuid.UUID
    step_slug: str
    task_index: int
    message_id: int
    attempt: int
    input: Any


def _rows(cursor: Any, query: str, params: Any = None) -> list[tuple[Any, ...]]:
    cursor.execute(query, params)
    return list(cursor.fetchall()) if cursor.description is not None else []


def _json(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value


class PreviousReleaseWorker:
    def __init__(self, cursor: Any, flow_slug: str, shape: dict[str, Any]) -> None:
        self.cursor = cursor
        self.flow_slug = flow_slug
        self.queue = flow_slug
        """The previous release's plain worker read the queue named by the flow slug, as given."""
        self.shape = shape
        self.worker_id = uuid.uuid4()
        self.registered = False

    # -- start-up ------------------------------------------------------------------------------

    def start(self) -> str:
        """Check, compile, register: what the previous worker did before its first poll."""
        self.check_database()
        status = self.compile()
        self.register()
        return status

    def check_database(self) -> None:
        missing = [
            row[0]
            for row in _rows(
                self.cursor,
                "select sig from unnest(%s::text[]) as sig where to_regprocedure(sig) is null",
                [list(REQUIRED_FUNCTIONS)],
            )
        ]
        if missing:
            raise IncompatibleDatabase(
                f"the database is not migrated for pgflow (missing {', '.join(missing[:3])}); "
                "run manage.py migrate"
            )
        protocol = int(_rows(self.cursor, "select pgflow.protocol_version()")[0][0])
        if protocol < PROTOCOL_VERSION:
            raise IncompatibleDatabase(
                f"the database speaks pgflow protocol {protocol}, this worker needs {PROTOCOL_VERSION}; "
                "run manage.py migrate"
            )
        if protocol > PROTOCOL_VERSION:
            raise IncompatibleDatabase(
                f"the database speaks pgflow protocol {protocol}, this worker only {PROTOCOL_VERSION}; "
                "deploy the new worker code (upgrades are coordinated, not rolling)"
            )

    def compile(self) -> str:
        (answer,) = _rows(
            self.cursor,
            "select pgflow.ensure_flow_compiled(%s, %s::jsonb, false)::text",
            [self.flow_slug, json.dumps(self.shape)],
        )[0]
        status = str(_json(answer)["status"])
        if status == "mismatch":
            raise IncompatibleDatabase(f"flow {self.flow_slug!r} differs from its compiled definition")
        return status

    def register(self) -> None:
        _rows(
            self.cursor,
            "insert into pgflow.workers (worker_id, queue_name, function_name) values (%s, %s, %s)",
            [self.worker_id, self.queue, self.flow_slug],
        )
        self.registered = True

    # -- the loop ------------------------------------------------------------------------------

    def poll(self, qty: int = 10, vt: int = 30) -> list[LegacyTask]:
        """Read visible messages, then claim them with the 3-argument claim."""
        ids = [
            row[0]
            for row in _rows(self.cursor, "select msg_id from pgmq.read(%s, %s, %s)", [self.queue, vt, qty])
        ]
        return self.claim(ids)

    def claim(self, msg_ids: list[int]) -> list[LegacyTask]:
        if not msg_ids:
            return []
        rows = _rows(
            self.cursor,
            "select flow_slug, run_id, step_slug, task_index, message_id, attempt, input"
            " from pgflow.start_tasks(%s, %s::bigint[], %s::uuid)",
            [self.flow_slug, list(msg_ids), self.worker_id],
        )
        return [
            LegacyTask(
                flow_slug=row[0],
                run_id=row[1] if isinstance(row[1], uuid.UUID) else uuid.UUID(str(row[1])),
                step_slug=row[2],
                task_index=int(row[3]),
                message_id=int(row[4]),
                attempt=int(row[5]),
                input=_json(row[6]),
            )
            for row in rows
        ]

    def complete(self, results: list[tuple[LegacyTask, Any]]) -> list[str]:
        """``complete_tasks`` over (task, output) pairs; the outcomes in the order given."""
        if not results:
            return []
        items = [
            {
                "run_id": str(task.run_id),
                "step_slug": task.step_slug,
                "task_index": task.task_index,
                "attempt": task.attempt,
                "output": output,
            }
            for task, output in results
        ]
        rows = _rows(
            self.cursor,
            "select run_id, step_slug, task_index, outcome from pgflow.complete_tasks(%s::jsonb)",
            [json.dumps(items)],
        )
        outcome = {(str(row[0]), row[1], int(row[2])): str(row[3]) for row in rows}
        return [outcome[(str(t.run_id), t.step_slug, t.task_index)] for t, _ in results]

    def drain(self, handler: Callable[[LegacyTask], Any], rounds: int = 20) -> list[str]:
        """Poll and complete until a poll finds nothing; every completion outcome in order."""
        outcomes: list[str] = []
        for _ in range(rounds):
            tasks = self.poll(vt=30)
            if not tasks:
                return outcomes
            outcomes += self.complete([(task, handler(task)) for task in tasks])
        raise AssertionError(f"the queue of {self.flow_slug} did not drain in {rounds} polls")

    def heartbeat(self) -> None:
        _rows(
            self.cursor,
            "update pgflow.workers set last_heartbeat_at = now() where worker_id = %s",
            [self.worker_id],
        )

    def stop(self) -> None:
        if self.registered:
            _rows(
                self.cursor,
                "update pgflow.workers set stopped_at = now(), last_heartbeat_at = now()"
                " where worker_id = %s",
                [self.worker_id],
            )
