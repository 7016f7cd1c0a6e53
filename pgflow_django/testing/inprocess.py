"""The worker's own parts, run in the calling thread on the caller's Django connection.

A run started inside Django's ``TestCase`` is never committed, so a worker on its own connections never
sees it. These subclasses keep every statement of the worker (``Engine``), its completion path
(``Completer.flush``) and its handler code (``Runner``), and change only where they run: each engine
statement runs in a savepoint of the caller's transaction (as the worker's autocommit statements each
stand alone, an error undoes only that statement), completions are recorded as soon as a claimed
batch's handlers have returned, and Django's connection is never closed between handlers.
"""

from __future__ import annotations

import queue
import uuid
from typing import Any

import psycopg
from django.db import connections
from psycopg import sql
from psycopg.rows import dict_row
from psycopg.types.json import JsonbLoader

from pgflow_django import queries
from pgflow_django.worker.completer import Completer, Completion, Failure
from pgflow_django.worker.connection import Claim, Engine
from pgflow_django.worker.runner import Runner
from pgflow_django.worker.slots import WorkerState

IN_PROCESS_WORKER_ID = uuid.UUID("00000000-0000-4000-8000-00000000c0de")
"""The worker id in-process claims record (``last_worker_id``, ``attempt_errors``): easy to tell apart."""

BATCH_SIZE = 100
"""Messages per claim and results per completion call: a real worker's completion batch size."""


_SAVEPOINT = queries.SAVEPOINT.text
_RELEASE = queries.RELEASE_SAVEPOINT.text
_ROLLBACK = queries.ROLLBACK_TO_SAVEPOINT.text


class InProcessEngine(Engine):
    """The worker's statements on Django's connection for ``using``, each in its own savepoint."""

    def __init__(self, using: str) -> None:
        super().__init__({}, "in-process")
        self.using = using
        self._bare = False

    @property
    def conn(self) -> psycopg.Connection[Any]:
        django_connection = connections[self.using]
        django_connection.ensure_connection()
        raw: psycopg.Connection[Any] = django_connection.connection
        return raw

    def _rows(self, query: str | sql.Composed, params: Any = None) -> list[dict[str, Any]]:
        conn = self.conn
        with conn.cursor(row_factory=dict_row) as cursor:
            # Django loads jsonb as text on its connections; the worker's own connections decode it
            cursor.adapters.register_loader("jsonb", JsonbLoader)
            if self._bare or not connections[self.using].in_atomic_block:
                cursor.execute(query, params)
            else:
                self._in_savepoint(conn, cursor, query, params)
            return cursor.fetchall() if cursor.description is not None else []

    @staticmethod
    def _in_savepoint(
        conn: psycopg.Connection[Any], cursor: psycopg.Cursor[Any], query: str | sql.Composed, params: Any
    ) -> None:
        """A savepoint, the statement and the release in one round trip (pipeline mode); after an
        error only this statement is undone and the caller's transaction goes on."""
        try:
            with conn.cursor() as control, conn.pipeline():
                control.execute(_SAVEPOINT)
                cursor.execute(query, params)
                control.execute(_RELEASE)
        except psycopg.Error:
            if not conn.broken:
                conn.execute(_ROLLBACK)
                conn.execute(_RELEASE)
            raise

    def claim(self, *args: Any, **kwargs: Any) -> Claim:
        """The worker's claim without a savepoint: a claim that fails raises to the caller anyway, and
        it is the statement a drain runs most (completions keep theirs: the completer retries them
        one by one, as a worker does, which an aborted transaction would not allow)."""
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

    def flush_pending(self) -> int:
        """Record every result handed on so far, in batches as the worker's completer would."""
        batch: list[Completion | Failure] = []
        while True:
            try:
                batch.append(self._queue.get_nowait())
            except queue.Empty:
                break
        self.failures += sum(1 for item in batch if isinstance(item, Failure))
        for start in range(0, len(batch), self.batch_size):
            self.flush(batch[start : start + self.batch_size])
        return len(batch)


class InlineRunner(Runner):
    """The worker's runner; the caller's Django connection stays open (inside ``TestCase`` closing it
    would doom the test's transaction)."""

    def _fresh_connections(self) -> None:
        return None
