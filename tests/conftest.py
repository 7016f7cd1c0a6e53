"""Every test outside tests/unit runs on the real test database.

``--partitioned-history`` partitions that database's history (what ``pgflow_partition --yes`` does)
right after it is migrated, so any test can be run against a partitioned install.

pytest-django creates ``test_<name>`` only for tests it sees needing a database when it collects them,
so the marker is added at collection time. Tests that mark themselves keep their own marker
(e.g. ``transaction=True``).
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from django.db import connection

from tests import workers
from tests.support import parallel

ROOT = Path(__file__).resolve().parent
UNIT = ROOT / "unit"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--partitioned-history",
        action="store_true",
        help="partition the test database's history tables (pgflow_partition --yes) after migrating",
    )


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup: None, django_db_blocker: Any, request: pytest.FixtureRequest) -> None:
    if not request.config.getoption("--partitioned-history"):
        return
    with django_db_blocker.unblock(), connection.cursor() as cursor:
        cursor.execute("select exists (select 1 from pgflow.history_partitioning)")
        row = cursor.fetchone()
        if row is not None and not row[0]:
            cursor.execute("select count(*) from pgflow.partition_history('1 day', 3, true)")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if UNIT in Path(item.path).resolve().parents:
            continue
        if item.get_closest_marker("django_db") is None:
            item.add_marker(pytest.mark.django_db)
    parallel.mark_groups(config, items, ROOT)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_finish(session: pytest.Session) -> None:
    """After every plugin's ``pytest_collection_modifyitems`` (pytest-django sorts by database use)
    and before an xdist worker sends its collection: the order in which units are handed out."""
    parallel.longest_first(session.config, session.items)


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


@pytest.fixture
def doc_module(tmp_path: Path) -> Iterator[Callable[[str, str], ModuleType]]:
    """``load(name, source)``: a docs page's code block imported as the module ``name``, as a reader who
    saved it would import it; the modules are forgotten afterwards."""
    sys.path.insert(0, str(tmp_path))
    loaded: list[str] = []

    def load(name: str, source: str) -> ModuleType:
        (tmp_path / f"{name}.py").write_text(source, encoding="utf-8")
        loaded.append(name)
        return importlib.import_module(name)

    try:
        yield load
    finally:
        sys.path.remove(str(tmp_path))
        for name in loaded:
            sys.modules.pop(name, None)
