"""Rules every schema file and every function of schema ``pgflow`` keeps, checked on the migrated catalog.

* Each function pins its ``search_path`` to ``pg_catalog, pgflow, pgmq``: what a name in its body
  means never depends on the caller's path. The three exceptions, ``is_valid_queue_name`` (a CHECK
  constraint's validator), ``message_priority`` (the queues' priority index) and ``run_id_bounds``
  (the hot path's partition bounds), unpinned so that they are inlined, name everything with
  ``pg_catalog``: each is checked to be inlined, and the first two to judge the same under a path
  that redefines their operators (``run_id_bounds`` uses no operator, only the uuid type's order).
* The functions of the claim/complete/start path plan once per session and by key
  (``plan_cache_mode = force_generic_plan``, no sequential scans, merge or hash joins, no JIT;
  ``tests/sql/plans`` shows those plans are index probes), and no other function does. One file,
  ``0990_settings_hot_path.sql``, states those settings for all of them.
* A file under ``sql/schema`` is named ``NNNN_<kind>_<name>.sql`` after the one object it creates
  (overloads of a function share its name and differ by number); a ``settings`` file creates none.
* No function exists that only the tests would call (the ones dropped by migration 0015 stay gone).
"""

from __future__ import annotations

import json
import re
import uuid

from pgflow_django.sql import SCHEMA_DIR, schema_files
from tests.sql.support import q

PINNED = "search_path=pg_catalog, pgflow, pgmq"
INLINED = frozenset(
    {
        "pgflow.event_lock_key(text,text)",
        "pgflow.is_valid_queue_name(text)",
        "pgflow.message_priority(jsonb)",
        "pgflow.run_id_bounds(uuid[])",
    }
)
HOT_PLANS = [
    "plan_cache_mode=force_generic_plan",
    "enable_seqscan=off",
    "enable_mergejoin=off",
    "enable_hashjoin=off",
    "jit=off",
]
HOT_PATH = frozenset(
    {
        "archive_task_messages",
        "cascade",
        "claim_classified",
        "classify_claim",
        "complete_and_hand_off",
        "complete_tasks",
        "fail_task",
        "lock_claimed_task",
        "hand_off_tasks",
        "limit_claim",
        "maybe_complete_runs",
        "release_limit_slots",
        "requeue_stalled_tasks",
        "send_event",
        "start_flows",
        "start_ready_steps",
        "start_shared_tasks",
        "start_tasks",
        "start_waits",
        "task_details",
        "task_transitions",
        "wake_waits",
        "start_child_runs",
        "delete_expired_events",
        "end_waits",
        "fail_child_run",
    }
)

_CREATES = re.compile(
    r"^create (?:or replace )?(function|table|type|schema)\s+(?:if not exists\s+)?(?:pgflow\.)?([a-z_0-9]+)",
    re.MULTILINE | re.IGNORECASE,
)
_FILE = re.compile(r"^[0-9]{4}_(function|table|type|schema)_([a-z_0-9]+)\.sql$")
_SETTINGS_FILE = re.compile(r"^[0-9]{4}_settings_[a-z_0-9]+\.sql$")


def test_every_pgflow_function_pins_its_search_path() -> None:
    rows = q(
        "select p.oid::regprocedure::text as function,"
        "       p.proconfig as config"
        "  from pg_proc as p where p.pronamespace = 'pgflow'::regnamespace order by 1"
    )
    assert len(rows) > 30, "the catalog query found no pgflow functions: the check would be vacuous"
    assert [row["function"] for row in rows if (row["config"] or [None])[:1] != [PINNED]] == sorted(INLINED)


def test_the_hot_path_functions_and_only_they_force_generic_plans() -> None:
    """A cached plan is PL/pgSQL's (a SQL function plans its statement on every call), so the hot path
    is PL/pgSQL; the previous release's claim wrapper, in SQL, keeps the default."""
    rows = q(
        "select p.oid::regprocedure::text as function,"
        "       p.proname as name, p.proconfig as config, l.lanname as language"
        "  from pg_proc as p join pg_language as l on l.oid = p.prolang"
        " where p.pronamespace = 'pgflow'::regnamespace order by 1"
    )
    hot = {row["function"] for row in rows if row["name"] in HOT_PATH and row["language"] == "plpgsql"}
    assert {row["function"]: row["config"] for row in rows if row["function"] not in INLINED} == {
        row["function"]: [PINNED, *HOT_PLANS] if row["function"] in hot else [PINNED]
        for row in rows
        if row["function"] not in INLINED
    }
    assert {row["name"] for row in rows if row["function"] in hot} == HOT_PATH


def test_each_schema_file_is_named_after_the_object_it_creates() -> None:
    files = schema_files()
    assert files, f"no schema files in {SCHEMA_DIR}"
    wrong: list[str] = []
    for path in files:
        named = _FILE.match(path.name)
        created = _CREATES.findall(path.read_text(encoding="utf-8"))
        if _SETTINGS_FILE.match(path.name) and not created:
            continue
        if named is None or len(created) != 1:
            wrong.append(f"{path.name}: creates {created}")
            continue
        kind, name = created[0]
        if (kind.lower(), name.lower()) != (named.group(1), named.group(2)):
            wrong.append(f"{path.name}: creates {kind.lower()} {name.lower()}")
    assert wrong == []


def test_the_file_rule_sees_a_misnamed_file() -> None:
    text = "create or replace function pgflow.archive_task_messages(queue_names text[])"
    kind, name = _CREATES.findall(text)[0]
    named = _FILE.match("0205_function_archive_messages.sql")
    assert named is not None and (kind, name) != (named.group(1), named.group(2))


def test_functions_only_tests_called_are_gone() -> None:
    rows = q(
        "select p.oid::regprocedure::text as function from pg_proc as p"
        " where p.pronamespace = 'pgflow'::regnamespace"
        "   and p.proname in ('maybe_complete_run', 'extend_vt_batch', 'start_ready_steps', 'set_vt_batch')"
        " order by 1"
    )
    assert [row["function"] for row in rows] == [
        "pgflow.set_vt_batch(text,bigint[],integer[],text)",
        "pgflow.start_ready_steps(uuid[])",
    ]


def test_the_queue_name_validator_is_inlined() -> None:
    [plan] = q(
        "explain (verbose, format json)"
        " select pgflow.is_valid_queue_name(v.name) from (values ('orders'), ('x')) as v(name)"
    )[0]["QUERY PLAN"]
    output = " ".join(plan["Plan"]["Output"])
    assert "is_valid_queue_name" not in output
    assert "~" in output


def test_the_queue_name_validator_ignores_a_hostile_path() -> None:
    """A path that puts its own ``~``, ``>=`` and ``<=`` for text and integers first changes nothing."""
    q("create schema hostile")
    q("create function hostile.yes(text, text) returns boolean language sql immutable as 'select true'")
    q("create function hostile.yes(integer, integer) returns boolean language sql immutable as 'select true'")
    for op in ("~", ">=", "<="):
        q(f"create operator hostile.{op} (leftarg = text, rightarg = text, function = hostile.yes)")
        q(f"create operator hostile.{op} (leftarg = integer, rightarg = integer, function = hostile.yes)")
    q("set local search_path = hostile, pg_catalog, pgflow")
    assert q("select 'A' ~ 'b' as yes")[0]["yes"] is True
    judged = q(
        "select v.name, pgflow.is_valid_queue_name(v.name) as ok"
        "  from (values ('orders'), ('Orders'), (''), (repeat('a', 48)), ('no space')) as v(name)"
        " order by v.name"
    )
    q("set local search_path = pg_catalog, public")
    assert {row["name"]: row["ok"] for row in judged} == {
        "orders": True,
        "Orders": False,
        "": False,
        "a" * 48: False,
        "no space": False,
    }


PRIORITIES = (
    "select v.n, pgflow.message_priority(v.headers::jsonb) as priority"
    '  from (values (1, \'{"priority": 7}\'), (2, \'{"priority": 500}\'), (3, \'{"priority": "x"}\'),'
    "               (4, null), (5, '{\"priority\": -2.6}'), (6, '[1]')) as v(n, headers)"
    " order by v.n"
)


def test_the_message_priority_is_inlined() -> None:
    [plan] = q(f"explain (verbose, format json) {PRIORITIES}")[0]["QUERY PLAN"]
    output = json.dumps(plan)
    assert "message_priority" not in output
    assert "jsonb_typeof" in output
    assert [row["priority"] for row in q(PRIORITIES)] == [7, 100, 0, 0, -3, 0]


def test_the_message_priority_ignores_a_hostile_path() -> None:
    """A path that puts its own ``->``, ``->>`` and ``=`` first changes nothing."""
    q("create schema hostile")
    q("create function hostile.nil(jsonb, text) returns jsonb language sql as $$select '1'::jsonb$$")
    q("create function hostile.nine(jsonb, text) returns text language sql immutable as $$select '9'$$")
    q("create function hostile.no(text, text) returns boolean language sql immutable as 'select false'")
    q("create operator hostile.-> (leftarg = jsonb, rightarg = text, function = hostile.nil)")
    q("create operator hostile.->> (leftarg = jsonb, rightarg = text, function = hostile.nine)")
    q("create operator hostile.= (leftarg = text, rightarg = text, function = hostile.no)")
    q("set local search_path = hostile, pg_catalog, pgflow")
    assert q("select ('{}'::jsonb ->> 'a') as v")[0]["v"] == "9"
    judged = q(PRIORITIES)
    q("set local search_path = pg_catalog, public")
    assert [row["priority"] for row in judged] == [7, 100, 0, 0, -3, 0]


BOUNDS = (
    "select b.lo, b.hi from pgflow.run_id_bounds(array["
    "'00000000-0000-7000-8000-000000000002', null, '00000000-0000-7000-8000-000000000001',"
    " 'ffffffff-0000-4000-8000-000000000000']::uuid[]) as b"
)


def test_the_run_id_bounds_are_inlined_and_leave_nulls_out() -> None:
    [plan] = q(f"explain (verbose, format json) {BOUNDS}")[0]["QUERY PLAN"]
    assert "run_id_bounds" not in json.dumps(plan)
    assert q(BOUNDS) == [
        {
            "lo": uuid.UUID("00000000-0000-7000-8000-000000000001"),
            "hi": uuid.UUID("ffffffff-0000-4000-8000-000000000000"),
        }
    ]
    assert q("select b.lo, b.hi from pgflow.run_id_bounds(array[null]::uuid[]) as b") == [
        {"lo": None, "hi": None}
    ]
    assert q("select b.lo, b.hi from pgflow.run_id_bounds('{}'::uuid[]) as b") == [{"lo": None, "hi": None}]
