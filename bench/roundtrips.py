"""Round trips to the database and where they go, counted at psycopg's cursor (every Django and
engine statement passes there): unlike milliseconds, the count does not depend on the machine's load.

A statement outside a pipeline is one round trip; a pipeline (a savepoint, a completion and its
release, sent together) is one, named after its statement that is not a savepoint command.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import psycopg

PHASES = (
    ("ensure_flow_compiled", "compile"),
    ("pgflow.start_flow", "start"),
    ("subscription_pause", "setup (pauses)"),
    ("with stale as materialized", "claim"),
    ("pgflow.complete_task", "complete"),
    ("pgflow.fail_task", "fail"),
    ("pgflow.reject_task", "fail"),
    ("with hidden as", "skip delays"),
)
"""The first marker found in a statement names its phase; anything else is a check or a result read."""

_SAVEPOINT_COMMANDS = ("savepoint ", "release savepoint ", "rollback to savepoint ")


def phase_of(statement: str) -> str:
    for marker, phase in PHASES:
        if marker in statement:
            return phase
    return "checks and results"


@dataclass
class Tally:
    """Round trips, statements and milliseconds waited, by phase."""

    round_trips: dict[str, int] = field(default_factory=dict)
    statements: int = 0
    milliseconds: dict[str, float] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return sum(self.round_trips.values())

    def add(self, phase: str, elapsed: float) -> None:
        self.round_trips[phase] = self.round_trips.get(phase, 0) + 1
        self.milliseconds[phase] = self.milliseconds.get(phase, 0.0) + elapsed * 1000

    def lines(self) -> list[str]:
        ordered = sorted(self.round_trips, key=lambda phase: -self.milliseconds[phase])
        return [
            f"    {phase:<24} {self.round_trips[phase]:3d} round trips  {self.milliseconds[phase]:6.1f} ms"
            for phase in ordered
        ]


def _text(cursor: psycopg.Cursor[Any], query: Any) -> str:
    if isinstance(query, bytes):
        return query.decode(errors="replace")
    if isinstance(query, str):
        return query
    return str(query.as_string(cursor.connection))


@contextlib.contextmanager
def counting() -> Iterator[Tally]:
    """Count every statement run inside the block (the counting itself costs time: keep it out of
    timed samples)."""
    tally = Tally()
    execute = psycopg.Cursor.execute
    pipeline = psycopg.Connection.pipeline
    open_pipelines: list[list[str]] = []

    def counted_execute(self: psycopg.Cursor[Any], query: Any, *args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return execute(self, query, *args, **kwargs)
        finally:
            tally.statements += 1
            text = _text(self, query)
            if open_pipelines:
                open_pipelines[-1].append(text)
            else:
                tally.add(phase_of(text), time.perf_counter() - started)

    @contextlib.contextmanager
    def counted_pipeline(self: psycopg.Connection[Any]) -> Iterator[Any]:
        started = time.perf_counter()
        sent: list[str] = []
        open_pipelines.append(sent)
        try:
            with pipeline(self) as handle:
                yield handle
        finally:
            open_pipelines.pop()
            named = [text for text in sent if not text.lower().startswith(_SAVEPOINT_COMMANDS)]
            tally.add(phase_of(named[0] if named else ""), time.perf_counter() - started)

    psycopg.Cursor.execute = counted_execute  # type: ignore[method-assign]
    psycopg.Connection.pipeline = counted_pipeline  # type: ignore[method-assign]
    try:
        yield tally
    finally:
        psycopg.Cursor.execute = execute  # type: ignore[method-assign]
        psycopg.Connection.pipeline = pipeline  # type: ignore[method-assign]
