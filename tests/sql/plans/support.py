"""What the plan tests share."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any


def nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every node of an EXPLAIN (FORMAT JSON) plan tree, the root first."""
    yield plan
    for child in plan.get("Plans", ()):
        yield from nodes(child)
