"""Sending events to the runs that wait for them (docs/durable.md), on Django's connection and in the
caller's transaction: an event sent inside ``transaction.atomic`` is delivered when it commits."""

from __future__ import annotations

import json
import uuid
from typing import Any

from django.db import DatabaseError, connections, transaction

from pgflow_django.conf import get_settings
from pgflow_django.db.dbguard import raise_if_not_migrated
from pgflow_django.db.query import fetch_value
from pgflow_django.runs import queries
from pgflow_django.runs.encoding import NotEncodable, check_storable_text, encode_json

EventKey = str | int | float | bool
"""A wait key's value: compared by its text, so ``42`` and ``"42"`` are the same key."""

_INVALID_PARAMETER = "22023"


def send_event(
    event: str,
    payload: Any = None,
    *,
    run_id: uuid.UUID | str | None = None,
    key: EventKey | None = None,
    event_id: str | None = None,
    using: str = "default",
) -> int:
    """Send the event ``event`` to the run ``run_id``, or to every run whose wait key has the value
    ``key``: each event step waiting for it now takes it, and the worker's next wait pass (at once:
    workers are notified when the transaction commits) completes the step with ``payload`` as its
    output. The event is also kept for ``PGFLOW["EVENT_RETENTION_SECONDS"]`` for the waits that
    start later. With ``event_id``, a second send of the same event and id while the first is kept
    is a no-op. Returns how many waiting steps it was delivered to (``pgflow.send_event``). Joins
    the caller's transaction: nothing is delivered unless it commits."""
    name = event_name(event)
    target_run, target_key = event_target(run_id, key)
    if event_id is not None:
        if not isinstance(event_id, str) or not event_id:
            raise ValueError(f"send_event: event_id must be a non-empty string, got {event_id!r}")
        check_storable_text(event_id, "send_event: event_id")
    try:
        body = encode_json(payload, escape_text=False)
    except NotEncodable as exc:
        raise ValueError(f"send_event({name!r}): the payload {exc}") from None
    retention = get_settings().event_retention_seconds
    try:
        with transaction.atomic(using=using), connections[using].cursor() as cursor:
            return int(
                fetch_value(
                    cursor, queries.SEND_EVENT, [name, body, target_run, target_key, event_id, retention]
                )
            )
    except DatabaseError as exc:
        cause = exc.__cause__
        if getattr(cause, "sqlstate", None) == _INVALID_PARAMETER:
            primary = getattr(getattr(cause, "diag", None), "message_primary", None)
            raise ValueError(str(primary or exc)) from None
        raise_if_not_migrated(exc, using)
        raise


def event_name(event: object) -> str:
    """The event's name, or ValueError: a non-empty string PostgreSQL can store."""
    if not isinstance(event, str) or not event:
        raise ValueError(f"send_event: the event name must be a non-empty string, got {event!r}")
    check_storable_text(event, "send_event: the event name")
    return event


def event_target(run_id: uuid.UUID | str | None, key: EventKey | None) -> tuple[uuid.UUID | None, str | None]:
    """``(run_id, key text)`` with exactly one set, or ValueError naming what to pass."""
    if (run_id is None) == (key is None):
        raise ValueError(
            "send_event: pass run_id= (one run) or key= (the runs whose wait key has that value), exactly one"
        )
    if run_id is not None:
        try:
            return uuid.UUID(str(run_id)), None
        except ValueError:
            raise ValueError(f"send_event: run_id must be a run's UUID, got {run_id!r}") from None
    if isinstance(key, str):
        check_storable_text(key, "send_event: key")
        return None, key
    if isinstance(key, bool | int | float):
        return None, json.dumps(key)
    raise ValueError(f"send_event: key must be a string or a number, got {type(key).__name__}")
