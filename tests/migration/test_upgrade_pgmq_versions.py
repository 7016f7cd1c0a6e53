"""The upgrade on each PGMQ version this app supports: 1.11.1 and 1.13.0 (the one ``migrate`` installs),
both SQL-only installs bundled in ``pgflow_django/sql/pgmq/``.

Each version gets a scratch database on the test server with that PGMQ and the baseline release (the
frozen 0002 delta); migration 0003 is applied as the Django migration does: the preflight, then the
frozen delta, in one transaction.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

from pgflow_django.db.pgmq_install import bundled_sql, bundled_versions
from pgflow_django.db.upgrade import UpgradeBlocked, preflight
from pgflow_django.sql import migration_sql, schema_sql
from tests.migration import upgrade_support as fx
from tests.sql.queue_access.support import check_static_matches_dynamic
from tests.support import scratch

pytestmark = pytest.mark.django_db

VERSIONS = ("1.11.1", "1.13.0")
"""The PGMQ versions this app supports, each tested here from its bundled SQL-only install."""
DELTA = "0003_queue_identity.sql"
CAMEL = "CamelFlow"
QUEUE = "camelflow"


def test_every_supported_version_is_bundled() -> None:
    assert bundled_versions() == list(VERSIONS)


@pytest.fixture(scope="module", params=VERSIONS)
def pgmq_sql(request: pytest.FixtureRequest) -> str:
    """The bundled SQL-only install of one PGMQ version."""
    return bundled_sql(request.param)


@pytest.fixture
def database(pgmq_sql: str, django_db_blocker: Any) -> Iterator[psycopg.Connection[Any]]:
    with django_db_blocker.unblock():
        params = fx.server_params()
    with fx.scratch_database(params, pgmq_sql) as conn:
        yield conn


def upgrade(conn: psycopg.Connection[Any]) -> None:
    """Migration 0003 as Django runs it: preflight, then the frozen delta, in one transaction."""
    with conn.transaction(), conn.cursor() as cur:
        preflight(cur, lock_timeout=10)
        cur.execute(migration_sql(DELTA))


def objects(cur: psycopg.Cursor[Any]) -> dict[str, Any]:
    """What PGMQ has for the queue 'camelflow': metadata spellings, tables, sequence and trigger."""
    q_table = fx.value(cur, "select to_regclass('pgmq.q_camelflow')::text")
    a_table = fx.value(cur, "select to_regclass('pgmq.a_camelflow')::text")
    sequence = None
    if q_table:
        (name,) = fx.rows(
            cur,
            "select s.oid::regclass::text from pg_depend d"
            " join pg_class s on s.oid = d.objid and s.relkind = 'S'"
            " join pg_attribute a on a.attrelid = d.refobjid and a.attnum = d.refobjsubid"
            " where d.refobjid = 'pgmq.q_camelflow'::regclass and a.attname = 'msg_id'"
            " and d.deptype in ('a', 'i')",
        )[0]
        sequence = (name, *fx.rows(cur, f"select last_value, is_called from {name}")[0])
    return {
        "meta": [
            row[0]
            for row in fx.rows(cur, "select queue_name from pgmq.meta where lower(queue_name) = %s", [QUEUE])
        ],
        "queue": q_table and (q_table, fx.value(cur, "select count(*) from pgmq.q_camelflow")),
        "archive": a_table and (a_table, fx.value(cur, "select count(*) from pgmq.a_camelflow")),
        "sequence": sequence,
        "notify_trigger": bool(
            q_table
            and fx.value(
                cur,
                "select exists (select 1 from pg_trigger where tgrelid = 'pgmq.q_camelflow'::regclass"
                " and tgname = 'pgflow_notify_insert')",
            )
        ),
    }


def expected(
    meta: str | None, queued: int = 0, archived: int = 0, last: int = 1, called: bool = True
) -> dict[str, Any]:
    if meta is None:
        return {"meta": [], "queue": None, "archive": None, "sequence": None, "notify_trigger": False}
    return {
        "meta": [meta],
        "queue": ("pgmq.q_camelflow", queued),
        "archive": ("pgmq.a_camelflow", archived),
        "sequence": ("pgmq.q_camelflow_msg_id_seq", last, called),
        "notify_trigger": True,
    }


def drain(cur: psycopg.Cursor[Any]) -> int:
    """Read, claim (queue-aware) and complete until the queue is empty; returns the tasks completed."""
    done = 0
    while True:
        ids = [row[0] for row in fx.rows(cur, "select msg_id from pgmq.read(%s, 30, 100)", [QUEUE])]
        if not ids:
            return done
        claimed = fx.rows(
            cur,
            "select outcome, run_id, step_slug, task_index, message_id, attempt"
            " from pgflow.start_tasks(%s, %s, %s::bigint[], %s::uuid)",
            [QUEUE, CAMEL, ids, fx.WORKER],
        )
        assert {row[0] for row in claimed} == {"claimed"}, claimed
        for row in claimed:
            assert fx.complete(cur, row[1:], {"ok": True}) == "completed"
            done += 1


def test_a_camel_case_queue_is_created_used_migrated_archived_dropped_and_recreated(
    database: psycopg.Connection[Any],
) -> None:
    cur = database.cursor()
    steps = (("first", [], "single"), ("second", ["first"], "single"))

    fx.create_flow(cur, CAMEL, *steps)
    assert objects(cur) == expected(CAMEL, called=False)

    runs = [fx.start(cur, CAMEL, {"n": number}) for number in range(3)]
    assert objects(cur) == expected(CAMEL, queued=3, last=3)
    first = fx.claim_legacy(cur, CAMEL, "first")
    assert len(first) == 3
    assert fx.complete(cur, first[0], {"n": 0}) == "completed"
    assert objects(cur) == expected(CAMEL, queued=3, archived=1, last=4)

    upgrade(database)
    assert objects(cur) == expected(CAMEL, queued=3, archived=1, last=4)
    assert fx.rows(cur, "select distinct queue_name from pgflow.steps where flow_slug = %s", [CAMEL]) == [
        (QUEUE,)
    ]
    assert fx.rows(
        cur, "select distinct queue_name from pgflow.step_tasks where flow_slug = %s", [CAMEL]
    ) == [(QUEUE,)]

    # The two claims made before the upgrade are still running: their workers complete them.
    for task in first[1:]:
        assert fx.complete(cur, task, {"n": 1}) == "completed"
    assert objects(cur) == expected(CAMEL, queued=3, archived=3, last=6)
    assert drain(cur) == 3
    assert objects(cur) == expected(CAMEL, archived=6, last=6)
    assert fx.rows(cur, "select distinct status from pgflow.runs where run_id = any(%s)", [runs]) == [
        ("completed",)
    ]

    cur.execute("select pgflow.delete_flow_and_data(%s)", [CAMEL])
    assert objects(cur) == expected(None)

    fx.create_flow(cur, CAMEL, *steps)
    assert objects(cur) == expected(QUEUE, called=False)
    fx.start(cur, CAMEL, {"n": 9})
    assert objects(cur) == expected(QUEUE, queued=1, last=1)
    assert drain(cur) == 2
    assert objects(cur) == expected(QUEUE, archived=2, last=2)


def test_baseline_hazards_block_the_upgrade_until_repaired(database: psycopg.Connection[Any]) -> None:
    cur = database.cursor()
    fx.load_normal(cur)
    for hazard in fx.HAZARDS:
        hazard.load(cur)
    before = fx.state(cur)

    with pytest.raises(UpgradeBlocked) as blocked:
        upgrade(database)

    assert fx.state(cur) == before
    expected_checks = set().union(*(hazard.checks for hazard in fx.HAZARDS))
    assert {finding.check for finding in blocked.value.findings if not finding.ok} == expected_checks
    assert fx.value(cur, "select pgflow.protocol_version()") == 1

    for hazard in fx.HAZARDS:
        hazard.repair(cur)
    upgrade(database)

    assert fx.value(cur, "select pgflow.protocol_version()") == 2
    assert fx.rows(cur, "select count(*) from pgflow.step_tasks where queue_name <> lower(flow_slug)") == [
        (0,)
    ]
    assert fx.rows(cur, "select count(*) from pgflow.steps where queue_name <> lower(flow_slug)") == [(0,)]
    assert fx.value(cur, "select count(*) from pgflow.step_tasks where message_id is null") >= 1
    assert fx.rows(cur, "select queue_name from pgmq.meta where lower(queue_name) = 'upgmixed'") == [
        ("UpgMixed",)
    ]


@pytest.fixture
def current(pgmq_sql: str, django_db_blocker: Any) -> Iterator[psycopg.Connection[Any]]:
    """A scratch database with this PGMQ version and the current schema."""
    with django_db_blocker.unblock():
        params = fx.server_params()
    with scratch.scratch_database("pgmqv", params, schema_sql(), pgmq_sql=pgmq_sql) as conn:
        yield conn


def test_the_static_queue_access_matches_pgmqs_own_statements(current: psycopg.Connection[Any]) -> None:
    """pgflow.queue_access's static branch is written for this PGMQ's tables, gives the results PGMQ's
    functions give, and carries a chain from start to completion through the hand-off."""
    plain, cur = current.cursor(), current.cursor(row_factory=dict_row)

    def run(query: str, params: Any) -> list[dict[str, Any]]:
        cur.execute(query, params)
        return cur.fetchall() if cur.description else []

    fx.create_flow(plain, "qa_static", ("a", [], "single"), ("b", ["a"], "single"))
    run("select pgmq.create('qa_dynamic')", None)
    assert run("select pgflow.write_queue_access() as queues", None) == [{"queues": ["qa_static"]}]
    check_static_matches_dynamic(run, "qa_static", "qa_dynamic")

    run_id = fx.start(plain, "qa_static", {"n": 1})
    assert [task[1] for task in fx.claim_legacy(plain, "qa_static", "a")] == ["a"]
    generation = fx.value(plain, "select generation from pgflow.flows where flow_slug = 'qa_static'")
    item = {"run_id": str(run_id), "step_slug": "a", "task_index": 0, "attempt": 1, "output": {"a": 1}}
    rows = run(
        "select outcome, step_slug from pgflow.complete_and_hand_off(%s::jsonb, 'qa_static', %s::uuid,"
        " array['qa_static', 'qa_static'], array['a', 'b'], array[%s, %s]::bigint[], 5)",
        [json.dumps([item]), fx.WORKER, generation, generation],
    )
    assert [(row["outcome"], row["step_slug"]) for row in rows] == [("completed", "a"), ("claimed", "b")]
    assert fx.complete(plain, (run_id, "b", 0, None, 1), {"b": 2}) == "completed"
    assert run("select status from pgflow.runs where run_id = %s", [run_id]) == [{"status": "completed"}]
    assert run("select count(*) as live from pgmq.q_qa_static", None) == [{"live": 2}], (
        "the parity sequence's two unarchived messages stay; both of the run's messages were archived"
    )
