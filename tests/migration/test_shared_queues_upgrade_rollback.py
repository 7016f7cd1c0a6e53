"""Migration 0006 (issue 6, item 8): an upgrade that fails rolls back completely, and the way back is
refused while routed flows or shared queues exist.

The failing upgrade runs on a scratch database at 0005 (PGMQ and the frozen 0002 delta from
``upgrade_support.scratch_database``, then 0003 as Django runs it, preflight first, then 0004 and
0005), with a conflicting ``pgflow.shared_queues`` made beforehand; 0006 runs in one transaction, as
the Django migration does, fails, and leaves catalog, rows, sequences and protocol as they were. The
down-migration guard runs alone (its first statement), so the test database keeps its schema."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from pgflow_django.db.upgrade import preflight
from pgflow_django.sql import migration_sql
from tests.migration import upgrade_support as fx
from tests.sql.shared_queues.support import compile_routed
from tests.sql.support import db_error, make_flow, q, shape_step, step, val

MODE_CHECK = "select pg_get_constraintdef(oid) from pg_constraint where conname = 'flows_queue_mode_check'"
DOWN = migration_sql("0006_shared_queues_down.sql")
GUARD = DOWN[: DOWN.index("$$;") + 3]
"""The backward SQL's first statement: the DO block that refuses while routed flows or shared queues exist."""


@pytest.fixture
def at_0005(django_db_blocker: Any) -> Iterator[psycopg.Connection[Any]]:
    with django_db_blocker.unblock():
        params = fx.server_params()
    with fx.scratch_database(params) as conn:
        with conn.transaction(), conn.cursor() as cur:
            preflight(cur, lock_timeout=10)
            cur.execute(migration_sql("0003_queue_identity.sql"))
        for delta in ("0004_run_control.sql", "0005_step_queues.sql"):
            with conn.transaction(), conn.cursor() as cur:
                cur.execute(migration_sql(delta))
        yield conn


def test_a_failing_upgrade_to_0006_changes_nothing(at_0005: psycopg.Connection[Any]) -> None:
    with at_0005.cursor() as cur:
        fx.create_flow(cur, "upg_plain", ("a", [], "single"))
        fx.start(cur, "upg_plain", {"n": 1})
        cur.execute("create table pgflow.shared_queues (queue_name text primary key, note text)")
        cur.execute("insert into pgflow.shared_queues values ('someone_elses', 'not pgflow')")
        before = fx.state(cur)
        check = fx.value(
            cur,
            MODE_CHECK,
        )
        assert fx.value(cur, "select pgflow.protocol_version()") == 3

    with pytest.raises(psycopg.errors.DuplicateTable), at_0005.transaction(), at_0005.cursor() as cur:
        cur.execute(migration_sql("0006_shared_queues.sql"))

    with at_0005.cursor() as cur:
        assert fx.state(cur) == before
        assert fx.value(cur, "select pgflow.protocol_version()") == 3
        assert (
            fx.value(
                cur,
                MODE_CHECK,
            )
            == check
        )
        assert "routed" not in check
        assert (
            fx.value(
                cur,
                "select to_regprocedure('pgflow.start_shared_tasks(text, bigint[], uuid, text[], text[])')",
            )
            is None
        )
        assert fx.value(cur, "select to_regprocedure('pgflow.provision_shared_queue(text)')") is None
        assert fx.rows(cur, "select queue_name, note from pgflow.shared_queues") == [
            ("someone_elses", "not pgflow")
        ]

        # after the conflict is removed, the same delta applies
        cur.execute("drop table pgflow.shared_queues")
    with at_0005.transaction(), at_0005.cursor() as cur:
        cur.execute(migration_sql("0006_shared_queues.sql"))
    with at_0005.cursor() as cur:
        assert fx.value(cur, "select pgflow.protocol_version()") == 4
        assert fx.rows(cur, "select flow_slug, queue_mode from pgflow.flows") == [("upg_plain", "flow")]


def test_the_down_migration_is_refused_naming_routed_flows_and_shared_queues() -> None:
    make_flow("sq_plain_keep", step("a"))
    compile_routed("sq_routed_z", {"only": "sq_down_b"}, shape_step("only"))
    compile_routed("sq_routed_a", {"only": "sq_down_a"}, shape_step("only"))
    protocol = val("select pgflow.protocol_version() as v")
    message = db_error(GUARD)
    assert "cannot migrate pgflow below 0006_shared_queues" in message
    assert "routed flows (sq_routed_a, sq_routed_z)" in message
    assert "sq_down_a" in message and "sq_down_b" in message
    assert "sq_plain_keep" not in message
    assert val("select pgflow.protocol_version() as v") == protocol
    assert val("select to_regclass('pgflow.shared_queues') is not null as t")


def test_the_down_guard_names_a_shared_queue_left_after_its_flows_are_deleted() -> None:
    assert GUARD.lstrip("-\n ").startswith("Frozen migration delta 0006_shared_queues, backward")
    assert "do $$" in GUARD and "drop " not in GUARD[GUARD.index("do $$") :]
    compile_routed("sq_routed_a", {"only": "sq_down_a"}, shape_step("only"))
    q("select pgflow.delete_flow_and_data('sq_routed_a')")
    message = db_error(GUARD)
    assert "routed flows (none)" in message and "sq_down_a" in message
    q("select pgmq.drop_queue('sq_down_a')")
    q("delete from pgflow.shared_queues")
    if val("select count(*) as n from pgflow.flows where queue_mode = 'routed'") == 0:
        q(GUARD)  # passes once none is left (other tests' committed routed flows would keep it refusing)
