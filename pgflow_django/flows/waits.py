"""What an event or sleep step waits for: the part of such a step's definition that a handler step
lacks, validated when the flow is defined (docs/durable.md).

Such a step has no handler: the engine completes its task when an event arrives or a time passes,
with no worker, thread or queue message holding it meanwhile.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Final, Literal, NoReturn, TypeAlias

WaitKind: TypeAlias = Literal["event", "sleep", "subflow"]
StepKind: TypeAlias = Literal["handler", "event", "sleep", "subflow"]
"""What completes a step's task: a worker's handler, an event, or a time."""

JSON_PATH: Final = re.compile(r"^\$(\.[A-Za-z_][A-Za-z0-9_]*|\[[0-9]+\])+$")
"""The JSON paths a wait may name: ``$.order.id``, ``$.items[0].id`` (the SQL column checks the same)."""
MAX_EVENT_NAME: Final = 200


class InvalidWait(ValueError):
    """A wait option is malformed; the message names the step and the fix."""


@dataclass(frozen=True)
class WaitSpec:
    """What an event step waits for (``event``, ``key``, ``seconds`` as its timeout), when a sleep
    step wakes (``seconds`` after it starts, or the timestamp at ``until`` in its input), or which
    flow a subflow step runs (``flow``)."""

    kind: WaitKind
    event: str | None = None
    key: str | None = None
    seconds: int | None = None
    until: str | None = None
    flow: str | None = None
    child: Any = field(default=None, compare=False)
    """The child ``Flow`` itself when the step was given one (compiled before its parent)."""

    def shape(self) -> dict[str, Any]:
        """This wait in the compiler's shape: the set options only (``pgflow.flow_shape`` strips NULLs)."""
        fields = {
            "kind": self.kind,
            "event": self.event,
            "key": self.key,
            "seconds": self.seconds,
            "until": self.until,
            "flow": self.flow,
        }
        return {name: value for name, value in fields.items() if value is not None}

    def describe(self) -> str:
        """One line for people: ``event order.approved by $.order_id, 3d timeout`` or ``sleep 60s``."""
        if self.kind == "event":
            keyed = f" by {self.key}" if self.key else ""
            timeout = f", {self.seconds}s timeout" if self.seconds is not None else ""
            return f"event {self.event}{keyed}{timeout}"
        if self.kind == "subflow":
            return f"child runs of flow {self.flow}"
        return f"sleep {self.seconds}s" if self.seconds is not None else f"sleep until {self.until}"


def event_wait(owner: str, event: object, key: object, timeout: int | None) -> WaitSpec:
    """An event step's wait, or InvalidWait naming what to change."""
    if not isinstance(event, str) or not event.strip() or len(event) > MAX_EVENT_NAME:
        raise InvalidWait(
            f"{owner}: event must be a non-empty name of at most {MAX_EVENT_NAME} characters, got {event!r}"
        )
    if not event.isprintable():
        raise InvalidWait(f"{owner}: event {event!r} has control characters; use a printable name")
    return WaitSpec("event", event=event, key=_path(owner, "key", key), seconds=timeout)


def sleep_wait(owner: str, seconds: int | None, until: object) -> WaitSpec:
    """A sleep step's wait: exactly one of ``seconds`` and ``until``."""
    if (seconds is None) == (until is None):
        raise InvalidWait(
            f"{owner}: pass seconds= (a fixed sleep) or until= (a JSON path into the step's input naming "
            "an ISO-8601 timestamp), exactly one"
        )
    return WaitSpec("sleep", seconds=seconds, until=_path(owner, "until", until))


def subflow_wait(slug: str, child: Any) -> WaitSpec:
    """A subflow step's wait: its child flow, by slug (``child``: the ``Flow`` when one was given)."""
    return WaitSpec("subflow", flow=slug, child=child)


def _path(owner: str, name: str, value: object) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not JSON_PATH.match(value):
        raise InvalidWait(
            f"{owner}: {name} must be a JSON path such as '$.order_id' or '$.items[0].id', got {value!r}"
        )
    return value


def waiting_handler(owner: str, wait: WaitSpec) -> Any:
    """The handler an event or sleep step records: never called by the engine, which completes such a
    task without a worker; a call (from code that treats every step as a handler) says so."""

    def no_handler(input: Any, ctx: Any = None) -> NoReturn:
        raise RuntimeError(f"{owner} waits ({wait.describe()}); it has no handler to call")

    no_handler.__name__ = no_handler.__qualname__ = f"wait:{owner}"
    return no_handler
