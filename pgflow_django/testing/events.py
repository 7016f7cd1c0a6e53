"""Events in tests: send one on the test's connection and run what it lets go (docs/durable.md)."""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import Any

from pgflow_django.flows.dsl import Flow
from pgflow_django.runs.events import EventKey
from pgflow_django.runs.events import send_event as send
from pgflow_django.testing.drain import drain


def send_event(
    event: str,
    payload: Any = None,
    *,
    run_id: uuid.UUID | str | None = None,
    key: EventKey | None = None,
    event_id: str | None = None,
    flows: Iterable[Flow | str] | None = None,
    using: str = "default",
) -> int:
    """``pgflow_django.send_event`` inside the test's transaction, then ``drain(flows=flows)`` (whose
    wait pass completes the waits the event reached, as a worker's does), so the steps after the wait
    have run when it returns (``flows``: those of ``PGFLOW["FLOWS"]`` when None). Returns how many
    waiting steps the event reached."""
    completed = send(event, payload, run_id=run_id, key=key, event_id=event_id, using=using)
    drain(flows=flows, using=using)
    return completed
