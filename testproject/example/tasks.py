"""Django tasks run by pgflow (TASKS in testproject/settings.py): the django.tasks backend's examples."""

from __future__ import annotations

from typing import Any

from testproject.example.task_api import task


@task()
def add(a: int, b: int) -> int:
    return a + b


@task(queue_name="mail", max_attempts=3, base_delay=0)
def send_welcome(address: str, *, fail_times: int = 0) -> dict[str, Any]:
    """Fails on its first ``fail_times`` attempts (counted in the ledger), then succeeds."""
    from testproject.example.models import LedgerEntry

    LedgerEntry.objects.create(flow="send_welcome", key=address)
    calls = LedgerEntry.objects.filter(flow="send_welcome", key=address).count()
    if calls <= fail_times:
        raise ConnectionError(f"mail server unavailable (call {calls})")
    return {"sent_to": address, "calls": calls}


@task()
def always_fails(reason: str) -> None:
    raise ValueError(reason)


@task(takes_context=True)
def which_attempt(context: Any, label: str) -> dict[str, Any]:
    return {"label": label, "attempt": context.attempt, "result_id": context.task_result.id}


@task()
async def async_double(n: int) -> int:
    return n * 2
