"""The post-seed migrations (0007_squashed_0038, which holds 0031_queue_access and 0034_queue_provisioning)
on queues made by 0006: with more than 32 queues the upgrade writes every queue's branch of static SQL
into the numbered function of its queue and pgflow.queue_access dispatches to them, so messages go
through the branches; going back to 0006, pgflow.queue_access, its numbered functions and
pgflow.queue_access_dynamic are gone and the queues work through PGMQ's functions as before."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.db.migrations.loader import MigrationLoader

from tests.migration import upgrade_support as fx

pytestmark = pytest.mark.django_db(transaction=True)

APP = "pgflow"
BEFORE = "0006_shared_queues"
PROVISIONING = "0007_squashed_0038"
PREFIX = "upg_qp_"
NUMBERED = (
    "select coalesce(array_agg(p.proname::text order by p.proname), '{}') from pg_proc as p"
    " where p.pronamespace = 'pgflow'::regnamespace and p.proname ~ '^queue_access_[0-9]{3}$'"
)


def migrate(target: str) -> None:
    MigrationExecutor(connection).migrate([(APP, target)])


def latest() -> str:
    return max(
        name for app, name in MigrationLoader(None, ignore_no_migrations=True).disk_migrations if app == APP
    )


@pytest.fixture
def at_0006() -> Iterator[Any]:
    migrate(BEFORE)
    try:
        with connection.cursor() as cursor:
            yield cursor
    finally:
        with connection.cursor() as cursor:
            fx.purge(cursor)
        migrate(latest())
        with connection.cursor() as cursor:
            cursor.execute("select pgflow.write_queue_access()")


def _source(cursor: Any, function: str) -> str:
    source = fx.value(cursor, "select prosrc from pg_proc where oid = to_regproc(%s)", [f"pgflow.{function}"])
    return str(source)


def _sent_by_branch(cursor: Any, queue: str) -> bool:
    """A static branch returns the whole record; PGMQ's send_batch (no branch) only the message id."""
    read_ct = fx.value(
        cursor,
        "select m.read_ct from pgflow.queue_access('send', %s, null, array[0], array['{}'::jsonb], null)"
        " as m",
        [queue],
    )
    return read_ct is not None


def test_the_upgrade_writes_the_branches_into_the_numbered_functions_and_back(at_0006: Any) -> None:
    cursor = at_0006
    queues = [f"{PREFIX}{i}" for i in range(33)]
    for queue in queues:
        fx.create_flow(cursor, queue, ("a", [], "single"))
    assert fx.value(cursor, "select to_regproc('pgflow.queue_access')") is None
    assert fx.value(cursor, NUMBERED) == []

    migrate(PROVISIONING)
    assert "if v_queue = " not in _source(cursor, "queue_access")
    assert len(fx.value(cursor, NUMBERED)) == 256
    for queue in queues:
        number = fx.value(cursor, "select lpad((hashtext(%s) & 255)::text, 3, '0')", [queue])
        assert f"if v_queue = '{queue}' then" in _source(cursor, f"queue_access_{number}")
        assert _sent_by_branch(cursor, queue)

    migrate(BEFORE)
    assert fx.value(cursor, NUMBERED) == []
    assert fx.value(cursor, "select to_regproc('pgflow.queue_access_dynamic')") is None
    assert fx.value(cursor, "select to_regproc('pgflow.queue_access')") is None
    for queue in queues:
        assert fx.value(cursor, "select count(*) from pgmq.send(%s, '{}'::jsonb)", [queue]) == 1
