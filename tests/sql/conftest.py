"""Fixtures of the SQL tests. Every test here runs on the real PostgreSQL + PGMQ, inside pytest-django's
per-test transaction (so ``now()`` is fixed during a test: time is simulated by back-dating timestamps).

The helpers themselves live in ``tests/sql/support.py``; these fixtures expose the two most used ones.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.sql import support


@pytest.fixture
def make_flow() -> Callable[..., str]:
    """``make_flow("f", step("a"), step("b", "a"), max_attempts=2)``: create_flow + add_step in order."""
    return support.make_flow


@pytest.fixture
def claim() -> Callable[..., list[dict[str, Any]]]:
    """``claim("f")``: pgmq.read on the flow's queue, then pgflow.start_tasks on the messages read."""
    return support.claim


def _state() -> dict[str, Any]:
    return {
        "rows": support.table_counts(),
        "relations": support.pgmq_relations(),
        "meta": support.q("select queue_name from pgmq.meta order by queue_name"),
    }


@pytest.fixture
def unchanged() -> Callable[[], Callable[[], None]]:
    """``check = unchanged()`` snapshots rows, PGMQ metadata and PGMQ relations; ``check()`` asserts
    nothing changed since (for refusals that must leave the database as it was)."""

    def take() -> Callable[[], None]:
        before = _state()

        def check() -> None:
            assert _state() == before

        return check

    return take
