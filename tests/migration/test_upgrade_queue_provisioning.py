"""Migration 0034_queue_provisioning on queues made by 0033: with more than 32 queues the upgrade moves
every branch of static SQL into the numbered function of its queue and pgflow.queue_access dispatches
to them; going back, pgflow.queue_access holds every branch again and the numbered functions and
pgflow.queue_access_dynamic are gone. Messages go through the queues' branches on both sides."""

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
BEFORE = "0033_limit_wake_locked_messages"
PROVISIONING = "0034_queue_provisioning"
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
def at_0033() -> Iterator[Any]:
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


def test_branches_move_into_the_numbered_functions_and_back(at_0033: Any) -> None:
    cursor = at_0033
    count = max(2, 33 - int(fx.value(cursor, "select count(*) from pgflow.engine_queues()")))
    queues = [f"{PREFIX}{i}" for i in range(count)]
    for queue in queues:
        fx.create_flow(cursor, queue, ("a", [], "single"))
    assert all(f"if v_queue = '{queue}' then" in _source(cursor, "queue_access") for queue in queues)
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
    assert all(f"if v_queue = '{queue}' then" in _source(cursor, "queue_access") for queue in queues)
    assert all(_sent_by_branch(cursor, queue) for queue in queues)
