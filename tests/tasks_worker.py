"""Loaded by task workers through ``OPTIONS['MODULES']`` (tests/tasks_settings.py): a task that runs
until the test opens its gate, and receivers that write every task_started and task_finished signal
to the ledger, so that tests can read what the worker process sent."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from django.dispatch import receiver

from pgflow_django.tasks import tasks_api

SIGNAL_LEDGER = "task_signal"
GATE_LEDGER = "task_gate"


@tasks_api.package.task()
def gated(key: str) -> str:
    """Runs until a ledger row ("task_gate", key) exists (at most 30 s), then returns ``key``."""
    from testproject.example.models import LedgerEntry

    deadline = time.monotonic() + 30
    while not LedgerEntry.objects.filter(flow=GATE_LEDGER, key=key).exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"gate {key} was never opened")
        time.sleep(0.05)
    return key


RAISED: dict[str, Callable[[], BaseException]] = {
    "exit": lambda: SystemExit(3),
    "interrupt": KeyboardInterrupt,
    "cancel": asyncio.CancelledError,
    "genexit": GeneratorExit,
    "nul": lambda: ValueError("bad \x00 byte and lone \ud800 surrogate"),
}


@tasks_api.package.task(max_attempts=2, base_delay=0)
def raises(kind: str) -> None:
    """Raises what ``kind`` names (``RAISED``) on every attempt: two attempts, no delay between."""
    raise RAISED[kind]()


@tasks_api.package.task(max_attempts=3, base_delay=0)
def nested_result(depth: int) -> Any:
    """Returns lists nested ``depth`` deep: past the engine's bound no retry can help."""
    value: Any = []
    for _ in range(depth - 1):
        value = [value]
    return value


def _record(name: str, sender: Any, task_result: Any) -> None:
    from testproject.example.models import LedgerEntry

    LedgerEntry.objects.create(
        flow=SIGNAL_LEDGER,
        key=f"{name} {task_result.id} {task_result.status} {sender.__name__} {task_result.task.name}",
        attempt=task_result.attempts,
    )


@receiver(tasks_api.task_started)
def record_started(sender: Any, task_result: Any, **kwargs: Any) -> None:
    _record("task_started", sender, task_result)


@receiver(tasks_api.task_finished)
def record_finished(sender: Any, task_result: Any, **kwargs: Any) -> None:
    _record("task_finished", sender, task_result)
