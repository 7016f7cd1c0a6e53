"""Every test outside tests/unit runs on the real test database.

pytest-django creates ``test_<name>`` only for tests it sees needing a database when it collects them,
so the marker is added at collection time. Tests that mark themselves keep their own marker
(e.g. ``transaction=True``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

UNIT = Path(__file__).resolve().parent / "unit"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if UNIT in Path(item.path).resolve().parents:
            continue
        if item.get_closest_marker("django_db") is None:
            item.add_marker(pytest.mark.django_db)
