"""Fixtures of the queue-identity tests: two flows, ``f`` and ``g``, with the same steps, whose messages
carry the same message ids (each PGMQ queue numbers its messages from 1). An operation on one flow's
task must touch only that flow's queue: the same id in the other queue names another task.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.sql import support


@pytest.fixture
def twins() -> Callable[..., support.Twins]:
    """``twins(step("a"), step("b", "a"), input=..., timeout=10)``: flows f and g with these steps and
    one run each, whose queues hold the same message ids (asserted)."""
    return support.start_twins
