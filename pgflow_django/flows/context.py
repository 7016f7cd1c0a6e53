"""The ``ctx`` a handler receives (DESIGN 3.1): who this task is, the worker's shutdown event, the
task's cancellation, and its deadline."""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

_UNSET: Any = object()
CANCEL_POLL_SECONDS = 0.05
"""How often ``await ctx.wait_cancelled()`` looks at the cancellation (the event is set by a thread)."""


class TaskTimeout(TimeoutError):
    """The handler ran past its step's ``timeout``: the attempt fails as a timeout, under the step's
    retry policy (raised by ``ctx.check()``, and by the worker into an async handler at its next await)."""

    def __init__(self, step_slug: str, timeout: float) -> None:
        super().__init__(f"step {step_slug!r} passed its timeout of {timeout:g}s")
        self.step_slug = step_slug
        self.timeout = timeout


class TaskCancelled(Exception):
    """``ctx.check()`` found the task's run cancelled: whatever the handler would return is not
    recorded, so it may as well stop now."""


@dataclass(frozen=True)
class Deadline:
    """When a handler's step timeout runs out, from the handler's start: on the process's monotonic
    clock (to compare with ``time.monotonic()``), and as a UTC datetime (``at``, to pass on, e.g. to
    an HTTP client or another service)."""

    monotonic: float
    timeout: float
    """The step's timeout in seconds."""

    @classmethod
    def after(cls, timeout: float) -> Deadline:
        return cls(time.monotonic() + timeout, timeout)

    @property
    def at(self) -> datetime:
        """The deadline as a UTC datetime (read from the wall clock now: most handlers never ask)."""
        return datetime.now(UTC) + timedelta(seconds=self.remaining())

    def remaining(self) -> float:
        """Seconds left (negative once passed)."""
        return self.monotonic - time.monotonic()

    @property
    def passed(self) -> bool:
        return time.monotonic() >= self.monotonic


class TaskContext:
    """Per-task facts; ``flow_input`` is fetched on first use only, because most handlers never need it."""

    __slots__ = (
        "_flow_input",
        "attempt",
        "cancel_event",
        "deadline",
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
        deadline: Deadline | None = None,
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
        self.deadline = deadline or Deadline.after(60)
        """When the step's timeout runs out (the engine's default timeout, 60 s, when not given)."""
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

    def check(self) -> None:
        """Raise ``TaskCancelled`` once the run is cancelled, or ``TaskTimeout`` once the deadline
        passed; call it between units of work of a long sync handler (an async one is cancelled at
        its next await when its deadline passes)."""
        if self.cancel_event.is_set():
            raise TaskCancelled(f"run {self.run_id} was cancelled")
        if self.deadline.passed:
            raise TaskTimeout(self.step_slug, self.deadline.timeout)

    async def wait_cancelled(self) -> None:
        """Returns once the run is cancelled; race it against the work (``asyncio.wait``) to stop early."""
        while not self.cancel_event.is_set():
            await asyncio.sleep(CANCEL_POLL_SECONDS)

    def __repr__(self) -> str:
        return (
            f"<TaskContext queue={self.queue_name} msg_id={self.message_id} run={self.run_id} "
            f"step={self.step_slug}[{self.task_index}] attempt={self.attempt}>"
        )
