"""The ``ctx`` a handler receives (DESIGN 3.1): who this task is, the worker's shutdown event, and
the task's cancellation."""

from __future__ import annotations

import asyncio
import json
import threading
import uuid
from typing import Any

_UNSET: Any = object()
CANCEL_POLL_SECONDS = 0.05
"""How often ``await ctx.wait_cancelled()`` looks at the cancellation (the event is set by a thread)."""


class TaskContext:
    """Per-task facts; ``flow_input`` is fetched on first use only, because most handlers never need it."""

    __slots__ = (
        "_flow_input",
        "attempt",
        "cancel_event",
        "flow_slug",
        "message_id",
        "queue_name",
        "run_id",
        "shutdown_event",
        "step_slug",
        "task_index",
        "using",
    )

    def __init__(
        self,
        *,
        flow_slug: str,
        run_id: uuid.UUID,
        step_slug: str,
        task_index: int,
        attempt: int,
        queue_name: str,
        message_id: int,
        shutdown_event: threading.Event,
        flow_input: Any = _UNSET,
        using: str = "default",
        cancel_event: threading.Event | None = None,
    ) -> None:
        self.flow_slug = flow_slug
        self.run_id = run_id
        self.step_slug = step_slug
        self.task_index = task_index
        self.attempt = attempt
        self.queue_name = queue_name
        self.message_id = message_id
        self.shutdown_event = shutdown_event
        self.using = using
        self.cancel_event = cancel_event or threading.Event()
        self._flow_input = flow_input

    @property
    def flow_input(self) -> Any:
        """The run's input, read on the handler's own Django connection (inside its transaction if atomic).

        Async handlers use ``await ctx.aflow_input()`` instead, as Django's ORM forbids sync queries there.
        """
        if self._flow_input is _UNSET:
            from django.db import connections

            from pgflow_django.db.query import fetch_one
            from pgflow_django.flows import queries

            with connections[self.using].cursor() as cursor:
                row = fetch_one(cursor, queries.RUN_INPUT, [self.run_id])
            if row is None:
                raise LookupError(f"run {self.run_id} no longer exists")
            self._flow_input = json.loads(row.value)
        return self._flow_input

    async def aflow_input(self) -> Any:
        """``flow_input`` for async handlers: the query runs on the handler's thread and connection."""
        if self._flow_input is not _UNSET:
            return self._flow_input
        from asgiref.sync import sync_to_async

        return await sync_to_async(lambda: self.flow_input, thread_sensitive=True)()

    @property
    def shutting_down(self) -> bool:
        """True once the worker was asked to stop: a long handler may checkpoint and return early."""
        return self.shutdown_event.is_set()

    @property
    def cancelled(self) -> bool:
        """True once the worker learnt (within a heartbeat) that this task's run was cancelled: the
        handler may stop early, and whatever it returns then is not recorded."""
        return self.cancel_event.is_set()

    async def wait_cancelled(self) -> None:
        """Returns once the run is cancelled; race it against the work (``asyncio.wait``) to stop early."""
        while not self.cancel_event.is_set():
            await asyncio.sleep(CANCEL_POLL_SECONDS)

    def __repr__(self) -> str:
        return (
            f"<TaskContext queue={self.queue_name} msg_id={self.message_id} run={self.run_id} "
            f"step={self.step_slug}[{self.task_index}] attempt={self.attempt}>"
        )
