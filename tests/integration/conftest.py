"""Integration tests run on the real test database: mark them ``django_db`` at collection time.

pytest-django creates ``test_<name>`` only for tests it sees needing a database when it collects them;
the autouse fixture of tests/conftest.py asks for ``db`` too late for that, so without this marker the
tests would run on the DATABASE_URL database itself. Tests that mark themselves keep their own marker
(e.g. ``transaction=True``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(item.path).resolve().parents and item.get_closest_marker("django_db") is None:
            item.add_marker(pytest.mark.django_db)
