"""Fixtures of the generated-queue tests: a "nothing changed" probe over rows, PGMQ metadata and PGMQ
relations, for the refusals that must leave the database as it was."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.sql import support


def _state() -> dict[str, Any]:
    return {
        "rows": support.table_counts(),
        "relations": support.pgmq_relations(),
        "meta": support.q("select queue_name from pgmq.meta order by queue_name"),
    }


@pytest.fixture
def unchanged() -> Callable[[], Callable[[], None]]:
    """``check = unchanged()`` snapshots the state; ``check()`` asserts nothing changed since."""

    def take() -> Callable[[], None]:
        before = _state()

        def check() -> None:
            after = _state()
            assert after == before

        return check

    return take
