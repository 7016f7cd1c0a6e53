"""Migration 0039_row_writes on a partitioned history: the history tables' foreign keys to flows and
steps go from the parents and every partition, each runs partition (and one made later) gets the
fillfactor, a flow with runs is still not deleted; the down delta brings the keys back."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from pgflow_django.sql import migration_sql
from tests.support.scratch import scratch_database, server_params

BEFORE = [
    "0002_core.sql",
    "0003_queue_identity.sql",
    "0004_run_control.sql",
    "0005_step_queues.sql",
    "0006_shared_queues.sql",
    "0007_squashed_0038.sql",
]
HISTORY_KEYS_TO_DEFINITIONS = """
select count(*) from pg_constraint as con
 where con.contype = 'f' and con.confrelid in ('pgflow.flows'::regclass, 'pgflow.steps'::regclass)
   and con.conrelid not in ('pgflow.steps'::regclass, 'pgflow.deps'::regclass,
                            'pgflow.flow_limits'::regclass, 'pgflow.limit_slots'::regclass)
"""
RUNS_PARTITION_OPTIONS = """
select coalesce(array_agg(coalesce(array_to_string(c.reloptions, ','), '') order by c.relname), '{}')
  from pg_inherits as i join pg_class as c on c.oid = i.inhrelid
 where i.inhparent = 'pgflow.runs'::regclass
"""


@pytest.fixture
def partitioned_at_0038(django_db_setup: None, django_db_blocker: Any) -> Iterator[psycopg.Connection[Any]]:
    with django_db_blocker.unblock():
        params = server_params()
    setup = [migration_sql(name) for name in BEFORE]
    with scratch_database("rowwrites", params, *setup) as conn:
        conn.execute("select pgflow.partition_history('1 day', 2, true)")
        conn.execute("select pgflow.create_flow('upg_rw')")
        conn.execute("select pgflow.add_step('upg_rw', 'a')")
        conn.execute("select pgflow.start_flows('upg_rw', '[{}, {}]'::jsonb)")
        yield conn


def _value(conn: psycopg.Connection[Any], query: str) -> Any:
    row = conn.execute(query).fetchone()
    assert row is not None
    return row[0]


def test_the_keys_go_from_every_partition_and_come_back(partitioned_at_0038: psycopg.Connection[Any]) -> None:
    conn = partitioned_at_0038
    assert _value(conn, HISTORY_KEYS_TO_DEFINITIONS) > 4, "the partitions had no keys of their own: vacuous"

    conn.execute(migration_sql("0039_row_writes.sql").encode("utf-8"))
    assert _value(conn, HISTORY_KEYS_TO_DEFINITIONS) == 0
    conn.execute("select pgflow.create_history_partitions(through => now() + interval '6 days')")
    options = _value(conn, RUNS_PARTITION_OPTIONS)
    assert len(options) > 4 and set(options) == {"fillfactor=50"}
    with pytest.raises(psycopg.errors.ForeignKeyViolation):
        conn.execute("delete from pgflow.flows where flow_slug = 'upg_rw'")
    conn.execute("select pgflow.start_flows('upg_rw', '[{}]'::jsonb)")

    conn.execute(migration_sql("0039_row_writes_down.sql").encode("utf-8"))
    assert _value(conn, HISTORY_KEYS_TO_DEFINITIONS) > 4
    assert set(_value(conn, RUNS_PARTITION_OPTIONS)) == {""}
    with pytest.raises(psycopg.errors.ForeignKeyViolation):
        conn.execute("delete from pgflow.flows where flow_slug = 'upg_rw'")
