"""The worker's own parts, run in the calling thread on the caller's Django connection.

A run started inside Django's ``TestCase`` is never committed, so a worker on its own connections never
sees it. These subclasses keep every statement of the worker (``Engine``), its completion path
(``Completer.flush``) and its handler code (``Runner``), and change only where they run: each engine
statement runs in a savepoint of the caller's transaction (as the worker's autocommit statements each
stand alone, an error undoes only that statement), completions are recorded as soon as a claimed
batch's handlers have returned (inside a transaction the drain's next claim travels in the same
round trip), and Django's connection is never closed between handlers.
"""

from __future__ import annotations

import queue
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import psycopg
from django.db import connections
from psycopg import sql
from psycopg.rows import dict_row
from psycopg.types.json import JsonbLoader

from pgflow_django.db.query import Query, read_rows
from pgflow_django.testing import queries
from pgflow_django.worker.completer import Completer, Completion, Failure
from pgflow_django.worker.connection import Claim, Engine
from pgflow_django.worker.runner import Runner
from pgflow_django.worker.slots import WorkerState

R = TypeVar("R")

IN_PROCESS_WORKER_ID = uuid.UUID("00000000-0000-4000-8000-00000000c0de")
"""The worker id in-process claims record (``last_worker_id``, ``attempt_errors``): easy to tell apart."""

BATCH_SIZE = 100
"""Messages per claim and results per completion call: a real worker's completion batch size."""


_SAVEPOINT = queries.SAVEPOINT.text
_RELEASE = queries.RELEASE_SAVEPOINT.text
_ROLLBACK = queries.ROLLBACK_TO_SAVEPOINT.text


Statement = tuple[Query[Any], Any]
"""A named statement of the toolkit's own and its parameters."""


def together(using: str, statements: Sequence[Statement]) -> list[list[Any]]:
    """Run a few of the toolkit's own statements in one round trip (pipeline mode) on the caller's
    connection, in order; the rows of each, read into its named row type."""
    django_connection = connections[using]
    django_connection.ensure_connection()
    conn: psycopg.Connection[Any] = django_connection.connection
    cursors = [conn.cursor() for _ in statements]
    try:
        with conn.pipeline():
            for cursor, (query, params) in zip(cursors, statements, strict=True):
                cursor.execute(query.statement(), params)
        return [
            read_rows(query, cursor.description, cursor.fetchall() if cursor.description else [])
            for cursor, (query, _) in zip(cursors, statements, strict=True)
        ]
    finally:
        for cursor in cursors:
            cursor.close()


@dataclass
class _Rider:
    """The drain's next claim, composed ahead so that it travels with the statement recording the
    batch in hand (one round trip for both); ``rows`` once it has been sent."""

    query: str | sql.Composed
    params: Any
    rows: list[dict[str, Any]] | None = None


class InProcessEngine(Engine):
    """The worker's statements on Django's connection for ``using``, each in its own savepoint."""

    def __init__(self, using: str) -> None:
        super().__init__({}, "in-process")
        self.using = using
        self._bare = False
        self._composing = False
        self._rider: _Rider | None = None

    @property
    def conn(self) -> psycopg.Connection[Any]:
        django_connection = connections[self.using]
        django_connection.ensure_connection()
        raw: psycopg.Connection[Any] = django_connection.connection
        return raw

    def _rows(self, query: str | sql.Composed, params: Any = None) -> list[dict[str, Any]]:
        if self._composing:
            self._rider = _Rider(query, params)
            return []
        rider, self._rider = self._rider, None
        in_transaction = connections[self.using].in_atomic_block
        if self._bare:
            if rider is not None and rider.rows is not None:
                return rider.rows  # ``claim`` checked that it is this statement
            rider = None
        elif rider is not None and rider.rows is not None:
            # sent already: kept for its claim if it took something; one that read nothing is
            # dropped, as what this statement records may make messages visible
            self._rider = rider if rider.rows and rider.rows[0]["read_count"] else None
            rider = None
        elif not in_transaction:
            # in autocommit each statement commits alone, as the worker's do: a claim sent with it
            # would hold the completion's run locks until the claim ends
            rider = None
        conn = self.conn
        with conn.cursor(row_factory=dict_row) as cursor, conn.cursor(row_factory=dict_row) as claim:
            # Django loads jsonb as text on its connections; the worker's own connections decode it
            cursor.adapters.register_loader("jsonb", JsonbLoader)
            claim.adapters.register_loader("jsonb", JsonbLoader)
            if self._bare or not in_transaction:
                cursor.execute(query, params)
            else:
                self._in_savepoint(conn, cursor, query, params, claim, rider)
                if rider is not None:
                    rider.rows = claim.fetchall()
                    self._rider = rider
            return cursor.fetchall() if cursor.description is not None else []

    @staticmethod
    def _in_savepoint(
        conn: psycopg.Connection[Any],
        cursor: psycopg.Cursor[Any],
        query: str | sql.Composed,
        params: Any,
        claim: psycopg.Cursor[Any],
        rider: _Rider | None,
    ) -> None:
        """A savepoint, the statement (and the next claim, if composed) and the release in one round
        trip (pipeline mode); after an error only this statement is undone (the claim with it) and the
        caller's transaction goes on."""
        try:
            with conn.cursor() as control, conn.pipeline():
                control.execute(_SAVEPOINT)
                cursor.execute(query, params)
                if rider is not None:
                    claim.execute(rider.query, rider.params)
                control.execute(_RELEASE)
        except psycopg.Error:
            if not conn.broken:
                conn.execute(_ROLLBACK)
                conn.execute(_RELEASE)
            raise

    def fetch(self, query: Query[R], params: Any = None) -> list[R]:
        """Run a statement of the toolkit's own (a time skip) as the engine runs a completion: in a
        savepoint, with a claim composed ahead travelling with it; its named rows."""
        return self._fetch(query, params)

    def sent_ahead(self) -> int:
        """Messages the claim sent ahead read (0 when none was sent); one that read nothing is dropped."""
        rider = self._rider
        read = int(rider.rows[0]["read_count"]) if rider is not None and rider.rows else 0
        if not read:
            self._rider = None
        return read

    def claim_next(self, *args: Any, **kwargs: Any) -> None:
        """Compose ``claim(*args, **kwargs)`` (the worker's statement, not run here) to send it with
        the next statement, which records the batch in hand: the claim then sees what it recorded."""
        self._composing = True
        try:
            super().claim(*args, **kwargs)
        finally:
            self._composing = False

    def claim(self, *args: Any, **kwargs: Any) -> Claim:
        """The worker's claim without a savepoint: a claim that fails raises to the caller anyway, and
        it is the statement a drain runs most (completions keep theirs: the completer retries them
        one by one, as a worker does, which an aborted transaction would not allow). A claim sent
        ahead with the last completion is answered from what it returned; it must be this claim (its
        tasks are held for it)."""
        sent = self._rider if self._rider is not None and self._rider.rows is not None else None
        if sent is not None:
            self._rider = None
            self.claim_next(*args, **kwargs)
            asked, self._rider = self._rider, None
            if asked is None or asked.query != sent.query or asked.params != sent.params:
                wanted = None if asked is None else asked.params
                raise AssertionError(
                    "in-process drain: the claim sent ahead is not the one asked for (a defect in the "
                    f"drain's order of claims): sent {sent.params!r}, asked {wanted!r}"
                )
            self._rider = sent
        self._bare = True
        try:
            return super().claim(*args, **kwargs)
        finally:
            self._bare = False

    def recover(self, exc: BaseException) -> bool:
        """Nothing to reconnect: the caller's connection (and its transaction) is not ours to replace."""
        return False

    def close(self) -> None:
        """The connection belongs to Django and the caller."""


class InlineCompleter(Completer):
    """The worker's completer without its thread: results wait until ``flush_pending``."""

    def __init__(self, engine: Engine, state: WorkerState) -> None:
        super().__init__(engine, state, batch_size=BATCH_SIZE, flush_ms=0)
        self.failures = 0
        """Failed attempts handed on so far."""

    def flush_pending(self, before: Callable[[], None] | None = None) -> int:
        """Record every result handed on so far, in batches as the worker's completer would.
        ``before`` is called first when one statement will record them all (completions only, or a
        single failure)."""
        batch: list[Completion | Failure] = []
        while True:
            try:
                batch.append(self._queue.get_nowait())
            except queue.Empty:
                break
        failures = sum(1 for item in batch if isinstance(item, Failure))
        self.failures += failures
        statements = (1 if len(batch) > failures else 0) + failures
        if before is not None and statements == 1 and len(batch) <= self.batch_size:
            before()
        for start in range(0, len(batch), self.batch_size):
            self.flush(batch[start : start + self.batch_size])
        return len(batch)


class InlineRunner(Runner):
    """The worker's runner; the caller's Django connection stays open (inside ``TestCase`` closing it
    would doom the test's transaction)."""

    def _fresh_connections(self) -> None:
        return None
