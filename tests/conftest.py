from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _db_for_marked(request: pytest.FixtureRequest) -> None:
    """Tests under tests/unit never touch the database; the others get one unless they ask otherwise."""
    if "tests/unit" in str(request.node.path).replace("\\", "/"):
        return
    if "transactional_db" in request.fixturenames or "db" in request.fixturenames:
        return
    request.getfixturevalue("db")
