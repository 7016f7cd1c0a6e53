"""The client API for async code: ``astart_flow``, ``aget_run``, ``await_run``, ...

Each function but ``await_run`` is its sync twin run through ``sync_to_async(thread_sensitive=True)``,
Django's rule for database work from async code (its async ORM methods do the same): the call runs on
the thread that holds the caller's Django connection, so it joins the caller's transaction exactly as
the sync function does, and a run started in a transaction that rolls back never existed.

``await_run`` waits on the event loop, never on a thread of its own: between two reads of the run it
sleeps with ``asyncio`` until ``poll`` seconds pass or the engine notifies ``pgflow_waits`` (a child
run ended, an event was delivered). One LISTEN connection per event loop and database serves every
``await_run`` of that loop: it opens with the first call that has to wait and closes when the last one
returns (or is cancelled). Behind a transaction pooler, where LISTEN hears nothing, ``await_run`` polls.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import uuid
import weakref
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from datetime import timedelta
from typing import Any, Final

import psycopg
from asgiref.sync import sync_to_async

from pgflow_django.conf import get_settings
from pgflow_django.db.connect import connection_params, first_line, listen_params
from pgflow_django.flows.dsl import Flow
from pgflow_django.runs import client, events, queries
from pgflow_django.runs.client import CancelResult, RunView

logger = logging.getLogger("pgflow_django.runs")

LISTEN_APPLICATION_NAME: Final = "pgflow await_run"
"""How the shared LISTEN connection shows in ``pg_stat_activity``."""
RECONNECT_SECONDS: Final = (1.0, 30.0)
"""The first and the longest pause before a lost LISTEN connection is opened again (polling goes on)."""


async def astart_flow(
    flow_or_slug: Flow | str,
    input: Any,
    *,
    run_id: uuid.UUID | str | None = None,
    delay: timedelta | int | None = None,
    idempotency_key: str | None = None,
    priority: int | None = None,
    using: str = "default",
) -> uuid.UUID:
    """``start_flow`` for async code: in the caller's transaction, as the sync call would be."""
    return await sync_to_async(client.start_flow, thread_sensitive=True)(
        flow_or_slug,
        input,
        run_id=run_id,
        delay=delay,
        idempotency_key=idempotency_key,
        priority=priority,
        using=using,
    )


async def astart_flows(
    flow_or_slug: Flow | str,
    inputs: Iterable[Any],
    *,
    run_ids: Sequence[uuid.UUID | str] | None = None,
    idempotency_keys: Sequence[str] | None = None,
    priority: int | None = None,
    using: str = "default",
) -> list[uuid.UUID]:
    """``start_flows`` for async code: one database call, in the caller's transaction."""
    return await sync_to_async(client.start_flows, thread_sensitive=True)(
        flow_or_slug,
        inputs,
        run_ids=run_ids,
        idempotency_keys=idempotency_keys,
        priority=priority,
        using=using,
    )


async def aget_run(run_id: uuid.UUID | str, *, using: str = "default") -> RunView:
    """``get_run`` for async code: the run as the caller's connection sees it; ``RunNotFound``."""
    return await sync_to_async(client.get_run, thread_sensitive=True)(run_id, using=using)


async def acancel_run(
    run_id: uuid.UUID | str, *, reason: str | None = None, using: str = "default"
) -> CancelResult:
    """``cancel_run`` for async code: the cancel commits with the caller's transaction."""
    return await sync_to_async(client.cancel_run, thread_sensitive=True)(run_id, reason=reason, using=using)


async def aretry_run(run_id: uuid.UUID | str, *, using: str = "default") -> int:
    """``retry_run`` for async code: the number of tasks queued again; ``RunNotFound``, ``RetryRefused``."""
    return await sync_to_async(client.retry_run, thread_sensitive=True)(run_id, using=using)


async def arun_now(run_id: uuid.UUID | str, *, using: str = "default") -> int:
    """``run_now`` for async code: the number of messages made visible; ``RunNotFound``, ``RunNowRefused``."""
    return await sync_to_async(client.run_now, thread_sensitive=True)(run_id, using=using)


async def asend_event(
    event: str,
    payload: Any = None,
    *,
    run_id: uuid.UUID | str | None = None,
    key: events.EventKey | None = None,
    event_id: str | None = None,
    using: str = "default",
) -> int:
    """``send_event`` for async code: delivered when the caller's transaction commits."""
    return await sync_to_async(events.send_event, thread_sensitive=True)(
        event, payload, run_id=run_id, key=key, event_id=event_id, using=using
    )


async def await_run(
    run_id: uuid.UUID | str, timeout: float = 60.0, poll: float = 0.2, *, using: str = "default"
) -> RunView:
    """``wait_for_run`` for async code: the run once it is completed or failed; ``TimeoutError`` after
    ``timeout`` seconds. It sleeps on the event loop, holding no thread: it reads the run again every
    ``poll`` seconds, and at once when the engine notifies ``pgflow_waits`` (a child run ended, an event
    was delivered), heard by one LISTEN connection per event loop that every waiting call shares.
    ``RunNotFound`` for an unknown (or uncommitted) id."""
    client.check_wait_arguments("await_run", timeout, poll)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    view = await aget_run(run_id, using=using)
    if view.is_terminal:
        return view
    async with _notified(using) as notified:
        while True:
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise client.wait_timed_out(view, timeout)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(min(poll, remaining)):
                    await notified.wait()
            notified.clear()  # before the read: a notification during it wakes the next wait at once
            view = await aget_run(run_id, using=using)
            if view.is_terminal:
                return view


class _Listener:
    """The LISTEN connection of one event loop and database: every notification wakes each waiting
    ``await_run`` of that loop to read its run again. It runs while one of them waits."""

    def __init__(self, params: dict[str, Any], done: Callable[[], object]) -> None:
        self._params = {"connect_timeout": 10, **params, "application_name": LISTEN_APPLICATION_NAME}
        self._done = done
        """Called when the last waiter left: the loop's registry forgets this listener."""
        self._waiters: set[asyncio.Event] = set()
        self._task: asyncio.Task[None] | None = None

    def join(self) -> asyncio.Event:
        event = asyncio.Event()
        self._waiters.add(event)
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._listen(), name=LISTEN_APPLICATION_NAME)
        return event

    def leave(self, event: asyncio.Event) -> None:
        self._waiters.discard(event)
        if not self._waiters and self._task is not None:
            task, self._task = self._task, None
            task.cancel()  # its connection closes as the task ends
            self._done()

    def _wake(self) -> None:
        for event in self._waiters:
            event.set()

    async def _listen(self) -> None:
        pause = RECONNECT_SECONDS[0]
        while True:
            try:
                async with await psycopg.AsyncConnection.connect(autocommit=True, **self._params) as conn:
                    await conn.execute(queries.LISTEN_RUN_ENDS.text)
                    pause = RECONNECT_SECONDS[0]
                    self._wake()  # a run that ended before the LISTEN began is read again now
                    async for _ in conn.notifies():
                        self._wake()
            except psycopg.Error as exc:
                logger.warning(
                    "await_run: LISTEN on %s failed (%s); polling goes on, reconnecting in %.0fs",
                    self._params.get("dbname", "the database"),
                    first_line(exc),
                    pause,
                )
                await asyncio.sleep(pause)
                pause = min(pause * 2, RECONNECT_SECONDS[1])


_listeners: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, _Listener]] = (
    weakref.WeakKeyDictionary()
)
"""Each event loop's running listeners, by their connection keywords."""
_listeners_lock = threading.Lock()


@contextlib.asynccontextmanager
async def _notified(using: str) -> AsyncIterator[asyncio.Event]:
    """An event set by each ``pgflow_waits`` notification while the block runs (never set where
    LISTEN is impossible: then the caller polls)."""
    params = _listen_params(using)
    if params is None:
        yield asyncio.Event()
        return
    loop = asyncio.get_running_loop()
    key = repr(sorted(params.items()))
    with _listeners_lock:
        running = _listeners.setdefault(loop, {})
        listener = running.get(key)
        if listener is None:
            listener = running[key] = _Listener(params, lambda: running.pop(key, None))
    event = listener.join()
    try:
        yield event
    finally:
        with _listeners_lock:
            listener.leave(event)


def _listen_params(using: str) -> dict[str, Any] | None:
    """Where the LISTEN goes, by the worker's rule (``db.connect.listen_params``): with ``using``'s
    own connection in place of the worker's."""
    settings = get_settings()
    return listen_params(connection_params(using, settings.pooler), settings.pooler, settings.listen_database)
