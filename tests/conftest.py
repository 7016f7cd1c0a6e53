"""Every test outside tests/unit runs on the real test database.

pytest-django creates ``test_<name>`` only for tests it sees needing a database when it collects them,
so the marker is added at collection time. Tests that mark themselves keep their own marker
(e.g. ``transaction=True``).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from django.db import connection

from tests import workers

UNIT = Path(__file__).resolve().parent / "unit"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if UNIT in Path(item.path).resolve().parents:
            continue
        if item.get_closest_marker("django_db") is None:
            item.add_marker(pytest.mark.django_db)


@pytest.fixture
def database_url(transactional_db: None) -> str:
    """The test database; ``transactional_db`` so that other processes see what a test commits."""
    return workers.url_from_settings(connection.settings_dict)


@pytest.fixture
def clean_example_flows(transactional_db: None) -> Iterator[None]:
    with connection.cursor() as cursor:
        workers.clean_example_flows(cursor)
    yield
    with connection.cursor() as cursor:
        workers.clean_example_flows(cursor)


@pytest.fixture
def spawn_worker(database_url: str, clean_example_flows: None, tmp_path: Path) -> Iterator[workers.Spawner]:
    """``spawn_worker("example_chain", "--concurrency", "2")`` -> a ready worker process."""
    spawner = workers.Spawner(database_url, tmp_path)
    yield spawner
    spawner.stop_all()
