"""LISTEN on the PGMQ insert channel of every queue the worker polls, on one connection, and wake
the claim loop for that queue, so an idle worker reacts in milliseconds without busy polling.
Polling stays as the fallback for lost notifications.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from typing import Any, Final

import psycopg

from pgflow_django.db.connect import first_line
from pgflow_django.worker import queries
from pgflow_django.worker.backoff import Backoff
from pgflow_django.worker.connection import connect
from pgflow_django.worker.slots import ALL_QUEUES, WorkerState

logger = logging.getLogger("pgflow_django.worker")


WAITS_DUE: Final = "*waits"
"""What the listener notifies the loop with for ``runs.queries.WAITS_CHANNEL``: no queue has this name."""


def insert_channel(queue_table: str) -> str:
    """PGMQ's notify-on-insert channel: ``pgmq.<table>.INSERT`` (the trigger uses TG_TABLE_NAME)."""
    return f"pgmq.{queue_table}.INSERT"


class Listener(threading.Thread):
    """Owns the third dedicated connection, whatever the number of queues; reconnects with back-off
    and wakes the loop for every queue after each (re)connect, since notifications sent while it was
    away are lost."""

    def __init__(self, params: dict[str, Any], channels: dict[str, str], state: WorkerState) -> None:
        super().__init__(name="pgflow-listener", daemon=True)
        self.params = params
        self.channels = channels
        """Each insert channel, and the queue whose inserts it announces."""
        self.state = state
        self.listening = threading.Event()
        """Set while LISTEN is active: the supervisor may then back off its fallback polling."""
        self._stop_event = threading.Event()

    def stop(self) -> None:
        self._stop_event.set()

    def run(self) -> None:
        backoff = Backoff()
        while not self._stop_event.is_set():
            conn: psycopg.Connection[Any] | None = None
            try:
                conn = connect(self.params, "listener")
                with conn.transaction():
                    for channel in self.channels:
                        conn.execute(queries.LISTEN.statement(channel=channel))
                self.listening.set()
                backoff.reset()
                self.state.notify_messages()
                while not self._stop_event.is_set():
                    for notification in conn.notifies(timeout=0.5):
                        queue = self.channels.get(notification.channel, ALL_QUEUES)
                        if logger.isEnabledFor(logging.DEBUG):
                            logger.debug("insert notification of queue=%s", queue)
                        self.state.notify_messages(queue)
                        if self._stop_event.is_set():
                            break
            except psycopg.Error as exc:
                self.listening.clear()
                if self._stop_event.is_set():
                    break
                delay = backoff.next()
                logger.warning(
                    "listener lost its connection (%s); polling continues, reconnecting in %.1fs",
                    first_line(exc),
                    delay,
                )
                self._stop_event.wait(delay)
            finally:
                self.listening.clear()
                if conn is not None:
                    with contextlib.suppress(psycopg.Error):
                        conn.close()
