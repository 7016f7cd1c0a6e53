"""A partitioned history inside the test's transaction (rolled back with it); on a test database that
``--partitioned-history`` already partitioned, that one."""

from __future__ import annotations

import pytest

from tests.sql.support import q, val


@pytest.fixture
def partitioned() -> None:
    if not val("select exists (select 1 from pgflow.history_partitioning) as p"):
        q("select count(*) from pgflow.partition_history('1 day', 3, true)")
