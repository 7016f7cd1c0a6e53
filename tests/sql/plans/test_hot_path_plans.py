"""The plans of the hot path reach rows by index, on empty tables and with 1,000,000 finished runs.

A long-lived worker's backend keeps each hot function's generic plan for the session (migration
0018), so a plan made on an empty database must stay good when the history is large. The check runs
the real start/claim/complete calls on a scratch database with ``auto_explain`` logging every
statement's plan (as JSON notices to this connection) and asserts, by plan shape only, that every
read of a table that grows with history (``runs``, ``step_states``, ``step_tasks``, the queue's
tables) is an index probe: no sequential scan, no index scan without an index condition. The small
definition tables (flows, steps, deps) may be read any way. Not checked: the worker's own
``pgmq.read`` (PGMQ's statement, run outside our functions) and PostgreSQL's foreign-key checks.

The partitioned variants partition the history first (``pgflow.partition_history``, daily
partitions reaching back over the history's ten days): a partition counts as its table, so every
read of every partition must be an index probe too.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator, Mapping
from typing import Any

import psycopg
import pytest
from psycopg import sql

from pgflow_django.sql import schema_sql
from tests.support.scratch import empty_database, scratch_database, server_params

pytestmark = [pytest.mark.django_db, pytest.mark.slow]

FLOW = "plans"
HISTORY = 1_000_000
GROWING = {
    "runs",
    "step_states",
    "step_tasks",
    f"q_{FLOW}",
    f"a_{FLOW}",
    "limit_holds",
    "limit_waits",
    "limit_slots",
    "run_limit_keys",
}
KEYS = {
    "runs": ("run_id",),
    "step_states": ("run_id",),
    "step_tasks": ("run_id", "message_id"),
    f"q_{FLOW}": ("msg_id",),
    f"a_{FLOW}": ("msg_id",),
}
"""The columns a read of a history table must bind (the flow-control tables hold in-flight rows only)."""
PARTITION = re.compile(r"^(runs|step_states|step_tasks)_(p[0-9]{8}|default)$")
HISTORY_DAYS = 10
TODAY_ROWS = 100
LIMITS = [
    {"kind": "concurrency", "key_source": "input", "key_field": "k", "amount": 1_000_000},
    {
        "kind": "rate",
        "key_source": "input",
        "key_field": "k",
        "amount": 1_000_000,
        "period": 1,
        "burst": 10_000,
    },
]
"""The flow's claims also pass its flow control (limits no batch reaches: nothing is deferred)."""
EXPLAIN = (
    "load 'auto_explain'",
    "set auto_explain.log_min_duration = 0",
    "set auto_explain.log_nested_statements = on",
    "set auto_explain.log_format = json",
    "set auto_explain.log_level = notice",
    "set client_min_messages = notice",
    # JIT for every statement planned in the session, cheaply (no inlining, no optimisation): the hot
    # functions must still compile none of theirs (the session's own calls are planned without it but
    # for one, planned_without_jit)
    "set jit_above_cost = 0",
    "set jit_inline_above_cost = -1",
    "set jit_optimize_above_cost = -1",
)


@pytest.fixture(scope="module")
def base_database(django_db_setup: None, django_db_blocker: Any) -> Iterator[tuple[dict[str, Any], str]]:
    """(server parameters, name of a database with PGMQ, the schema files and a 3-step chain flow),
    installed once for the module: each variant starts from a copy of it."""
    with django_db_blocker.unblock():
        params = server_params()
    flow = (
        f"select pgflow.create_flow('{FLOW}');"
        f" select pgflow.add_step('{FLOW}', 'a');"
        f" select pgflow.add_step('{FLOW}', 'b', array['a']);"
        f" select pgflow.add_step('{FLOW}', 'c', array['b']);"
        f" select pgflow.set_flow_limits('{FLOW}', '{json.dumps(LIMITS)}'::jsonb)"
    )
    with scratch_database("plans_base", params, schema_sql(), flow) as conn:
        name = conn.info.dbname
        conn.close()
        yield params, name


@pytest.fixture(
    params=[
        (0, False),
        (HISTORY, False),
        (0, True),
        (HISTORY, True),
    ],
    ids=["empty", "million_finished_runs", "partitioned_empty", "partitioned_million_finished_runs"],
)
def scratch(
    request: pytest.FixtureRequest, base_database: tuple[dict[str, Any], str]
) -> Iterator[psycopg.Connection[Any]]:
    """A copy of the base database, its history partitioned or not, and ``request.param[0]``
    finished runs of the flow; dropped afterwards."""
    runs, partitioned = request.param
    params, base = base_database
    with (
        empty_database("plans", params, template=base) as name,
        psycopg.connect(**{**params, "dbname": name}, autocommit=True) as conn,
    ):
        if partitioned:
            with conn.transaction():
                conn.execute("select count(*) from pgflow.partition_history('1 day', 3, true)")
                conn.execute(
                    "select pgflow.create_history_partitions(now() - make_interval(days => %s))",
                    [HISTORY_DAYS],
                )
        if runs:
            preload_history(conn, runs)
        analyze(conn, partitioned)
        disable_foreign_key_checks(conn)
        yield conn


def disable_foreign_key_checks(conn: psycopg.Connection[Any]) -> None:
    """Disable the triggers that check and enforce the foreign keys (the constraints stay, so the
    planner's join estimates do not change): auto_explain logged a plan for each of their statements
    on every row, four in five of the check's notices, which it then left out (``hot_path_plans``)."""
    triggers = conn.execute(
        "select t.tgrelid::regclass::text, t.tgname from pg_trigger as t"
        "  join pg_constraint as c on c.oid = t.tgconstraint"
        " where t.tgisinternal and c.contype = 'f'"
    ).fetchall()
    assert triggers, "no foreign-key trigger found: the check would log their plans again"
    with conn.transaction():
        for table, trigger in triggers:
            conn.execute(
                sql.SQL("alter table {} disable trigger {}").format(sql.SQL(table), sql.Identifier(trigger))
            )


def analyze(conn: psycopg.Connection[Any], partitioned: bool) -> None:
    """Fresh statistics, as autovacuum leaves them: a partitioned history's empty partitions (the days
    ahead, the history's gaps) are not analyzed before their first rows arrive (an empty partition a
    manual ANALYZE saw is planned as empty: a walk of it looks cheaper than a probe until its first
    autoanalyze replans)."""
    if not partitioned:
        conn.execute("analyze")
        return
    tables = conn.execute(
        "select c.oid::regclass::text, exists (select 1 from pg_inherits as i where i.inhrelid = c.oid)"
        "  from pg_class as c"
        " where c.relnamespace in ('pgflow'::regnamespace, 'pgmq'::regnamespace) and c.relkind = 'r'"
    ).fetchall()
    for name, is_partition in tables:
        table = sql.SQL(name)
        if not is_partition or conn.execute(
            sql.SQL("select exists (select from {})").format(table)
        ).fetchone() == (True,):
            conn.execute(sql.SQL("analyze {}").format(table))


def history_end(conn: psycopg.Connection[Any], runs: int) -> Any:
    """When the history's newest run started: ``TODAY_ROWS`` runs into the current day, the state each
    day begins with, whatever the time of the check (the partition new runs go to is small: plans
    made on one were found walking its status index only by a run of this check just after
    midnight)."""
    row = conn.execute(
        "select date_bin('1 day', now(), timestamptz '2000-01-03 00:00:00+00')"
        " + make_interval(secs => 86400.0 * %s * %s / %s)",
        [HISTORY_DAYS, TODAY_ROWS, runs],
    ).fetchone()
    assert row is not None
    return row[0]


def preload_history(conn: psycopg.Connection[Any], runs: int) -> None:
    """``runs`` finished runs of the flow started over ``HISTORY_DAYS`` days up to ``history_end``
    (time-ordered ids, as pgflow makes them), one completed step and task each, set-based (foreign
    keys are not checked: the rows are consistent by construction), then fresh statistics."""
    with conn.transaction():
        conn.execute("set local session_replication_role = replica")
        conn.execute(
            "create temporary table history on commit drop as"
            " select encode(overlay(uuid_send(gen_random_uuid()) placing substring(int8send(floor(1000"
            "   * extract(epoch from %s::timestamptz"
            "   - make_interval(secs => 86400.0 * %s * n / %s)))::bigint) from 3)"
            "   from 1 for 6), 'hex')::uuid as run_id, n"
            " from generate_series(1, %s) as n",
            [history_end(conn, runs), HISTORY_DAYS, runs, runs],
        )
        conn.execute(
            "insert into pgflow.runs"
            " (run_id, flow_slug, status, input, output, remaining_steps, completed_at)"
            " select h.run_id, %s, 'completed', '{}', '{}', 0, clock_timestamp() from history as h",
            [FLOW],
        )
        conn.execute(
            "insert into pgflow.step_states"
            " (flow_slug, run_id, step_slug, status, remaining_tasks, initial_tasks, output,"
            "  started_at, completed_at)"
            " select %s, h.run_id, 'c', 'completed', 0, 1, '{}', clock_timestamp(), clock_timestamp()"
            "   from history as h",
            [FLOW],
        )
        conn.execute(
            "insert into pgflow.step_tasks (flow_slug, run_id, step_slug, message_id, status, attempts_count,"
            "  output, queue_name, started_at, completed_at)"
            " select %s, h.run_id, 'c', h.n, 'completed', 1, '{}', %s, clock_timestamp(), clock_timestamp()"
            "   from history as h",
            [FLOW, FLOW],
        )
        # the queue's next ids come after the history's (the (queue_name, message_id) key is unique)
        conn.execute(
            sql.SQL("select setval(pg_get_serial_sequence({}, 'msg_id'), %s)").format(
                sql.Literal(f"pgmq.q_{FLOW}")
            ),
            [runs],
        )


def with_jit_off(session: psycopg.Connection[Any], statement: str, params: list[Any]) -> None:
    session.execute("set jit = off")
    session.execute(statement, params)
    session.execute("set jit = on")


def planned_without_jit(session: psycopg.Connection[Any], statement: str, params: list[Any]) -> list[Any]:
    """The rows of ``statement``, its own plan made without JIT (a cursor declared with ``jit`` off)
    and run with it on: the functions it calls still plan their statements under the session's JIT
    settings, the check's point, and the session's statements are not compiled one by one (that took
    most of the check's time; ``hot_path_plans`` sends its first start plainly, which is compiled)."""
    with session.transaction():
        session.execute("set local jit = off")
        with session.cursor(name="planned_without_jit") as cursor:
            cursor.execute(statement, params)
            session.execute("set local jit = on")
            return cursor.fetchall()


def hot_path_plans(conn: psycopg.Connection[Any]) -> list[dict[str, Any]]:
    """The plan of every statement a start of 1 and of 1,000 runs, their claims and completions run
    (plain, then handing off the next step), and a pass of stalled recovery make, in a fresh session
    (so every plan is made on the tables as they are now)."""
    plans: list[dict[str, Any]] = []
    reading = False

    def keep(notice: psycopg.errors.Diagnostic) -> None:
        text = notice.message_primary or ""
        if "plan:" in text and not reading and "OPERATOR(pg_catalog.=)" not in text:
            found = json.loads(text.split("plan:", 1)[1])
            plans.append({**found["Plan"], "Query Text": found.get("Query Text", ""), "JIT": "JIT" in found})

    def read(size: int) -> list[int]:
        """PGMQ's read of ``size`` messages (its statements are not ours: not kept, nor compiled)."""
        nonlocal reading
        reading = True
        with session.transaction():
            session.execute("set local jit = off")
            ids = [
                row[0] for row in session.execute("select msg_id from pgmq.read(%s, 30, %s)", [FLOW, size])
            ]
        reading = False
        return ids

    with psycopg.connect(conn.info.dsn, autocommit=True) as session:
        for setting in EXPLAIN:
            session.execute(setting)
        session.add_notice_handler(keep)
        worker = uuid.uuid4()
        for size in (1, 1000):
            inputs = json.dumps([{"k": f"key-{n % 20}"} for n in range(size)])
            start = "select pgflow.start_flows(%s, %s::jsonb)"
            if size == 1:
                session.execute(start, [FLOW, inputs])
            else:
                planned_without_jit(session, start, [FLOW, inputs])
            for _ in ("a", "b", "c"):
                ids = read(size)
                assert len(ids) == size
                claimed = planned_without_jit(
                    session,
                    "select run_id, step_slug, task_index, attempt"
                    "  from pgflow.start_tasks(%s, %s, %s, %s, null)",
                    [FLOW, FLOW, ids, worker],
                )
                assert len(claimed) == size
                items = [
                    {
                        "run_id": str(run),
                        "step_slug": step,
                        "task_index": index,
                        "attempt": attempt,
                        "output": {},
                    }
                    for run, step, index, attempt in claimed
                ]
                outcomes = planned_without_jit(
                    session, "select outcome from pgflow.complete_tasks(%s::jsonb)", [json.dumps(items)]
                )
                assert {row[0] for row in outcomes} == {"completed"}
        row = session.execute("select generation from pgflow.flows where flow_slug = %s", [FLOW]).fetchone()
        assert row is not None
        support = [[FLOW] * 3, ["a", "b", "c"], [row[0]] * 3]
        # the hand-off leaves the tasks of a flow with flow control to a read: its chain runs without
        set_limits = "select pgflow.set_flow_limits(%s, %s::jsonb)"
        # (set_flow_limits is no hot function: the session's JIT setting applies to it)
        with_jit_off(session, set_limits, [FLOW, "[]"])
        for size in (1, 1000):
            planned_without_jit(
                session, "select pgflow.start_flows(%s, %s::jsonb)", [FLOW, json.dumps([{}] * size)]
            )
            ids = read(size)
            held = planned_without_jit(
                session,
                "select run_id, step_slug, task_index, attempt from pgflow.start_tasks(%s, %s, %s, %s, null)",
                [FLOW, FLOW, ids, worker],
            )
            for _ in ("a", "b", "c"):
                items = [
                    {
                        "run_id": str(run),
                        "step_slug": step,
                        "task_index": index,
                        "attempt": attempt,
                        "output": {},
                    }
                    for run, step, index, attempt in held
                ]
                rows = planned_without_jit(
                    session,
                    "select outcome, run_id, step_slug, task_index, attempt"
                    "  from pgflow.complete_and_hand_off(%s::jsonb, %s, %s, %s, %s, %s, %s)",
                    [json.dumps(items), FLOW, worker, *support, size],
                )
                assert {r[0] for r in rows if r[0] != "claimed"} == {"completed"}
                held = [tuple(r[1:]) for r in rows if r[0] == "claimed"]
            assert held == [], "each completion handed off the next step"
        reading = True
        unfinished = session.execute(
            "select count(*) from pgflow.runs where flow_slug = %s and status <> 'completed'", [FLOW]
        ).fetchone()
        assert unfinished == (0,)
        reading = False
        with_jit_off(session, set_limits, [FLOW, json.dumps(LIMITS)])
        planned_without_jit(session, "select * from pgflow.requeue_stalled_tasks()", [])
    return plans


def scans(
    plan: dict[str, Any], leading: Mapping[str, str], rescanned: bool = False, limited: bool = False
) -> Iterator[tuple[str, str]]:
    """(access, relation) of every node of a plan tree that names a relation. Reported as walks: an
    index scan with no index condition, or one whose condition leaves the index's first column
    (``leading``, by index name) free (it reads every entry that matches the later columns), and a
    scan matching a whole array (``= ANY``) on the inner side of a nested loop whose outer side reads
    a growing table: the batch-sized array is matched again for every row of a batch-sized outer
    side, so the work grows with the square of the batch. A queue's head (its priority index walked
    for a ``LIMIT``, as the claim's read does) is a probe: it stops at the first visible messages."""
    if "Relation Name" in plan:
        node = plan["Node Type"]
        condition = str(plan.get("Index Cond", plan.get("Recheck Cond", "")))
        if node == "Bitmap Heap Scan" and rescanned and "= ANY (" in condition:
            node = "Array rescanned per outer row"
        elif node == "Bitmap Heap Scan" and not binds_a_key(table_of(plan["Relation Name"]), condition):
            node = "Index Scan not by its row's key"
        elif node in {"Index Scan", "Index Only Scan"}:
            first = leading.get(str(plan.get("Index Name", "")))
            if limited and str(plan.get("Index Name", "")).endswith("_priority_idx"):
                node = "Queue head"
            elif not condition:
                node = "Full Index Scan"
            elif first is not None and not re.search(rf"\b{re.escape(first)}\b", condition):
                node = "Index Scan without its first column"
            elif not binds_a_key(table_of(plan["Relation Name"]), condition):
                node = "Index Scan not by its row's key"
            elif rescanned and "= ANY (" in condition:
                node = "Array rescanned per outer row"
        yield node, table_of(plan["Relation Name"])
    children = plan.get("Plans", ())
    outer_grows = plan["Node Type"] == "Nested Loop" and any(
        child.get("Parent Relationship") == "Outer" and reads_growing_table(child) for child in children
    )
    for child in children:
        inner = outer_grows and child.get("Parent Relationship") == "Inner"
        yield from scans(child, leading, rescanned or inner, plan["Node Type"] == "Limit")


def binds_a_key(table: str, condition: str) -> bool:
    """Whether an index condition binds a column that identifies the history table's rows (a run, a
    message) by equality: any other condition (a queue, a status, a range of run ids) selects a share
    of the history that grows."""
    if table == "runs" and "status = 'started'" in condition:
        return True  # the runs in flight (with the index's first column, checked before)
    return not KEYS.get(table) or any(re.search(rf"\b{key} = ", condition) for key in KEYS[table])


def table_of(relation: str) -> str:
    """A partition counts as its table."""
    partition = PARTITION.match(relation)
    return partition.group(1) if partition else relation


def reads_growing_table(plan: dict[str, Any]) -> bool:
    return table_of(str(plan.get("Relation Name", ""))) in GROWING or any(
        reads_growing_table(child) for child in plan.get("Plans", ())
    )


ANY_ROW = re.compile(
    r"exists \(select 1 from pgflow\.limit_holds\) or exists \(select 1 from pgflow\.limit_waits\)"
)
"""Stalled recovery's question whether any flow-control row is held: a scan that stops at its first row."""
WALKS = {
    "Seq Scan",
    "Full Index Scan",
    "Index Scan without its first column",
    "Index Scan not by its row's key",
    "Array rescanned per outer row",
}


def growing_table_scans(
    plans: list[dict[str, Any]], leading: Mapping[str, str] | None = None
) -> tuple[set[tuple[str, str, str]], set[str]]:
    """(each scan of a growing table that is not a probe, with its statement; growing tables probed)."""
    sequential: set[tuple[str, str, str]] = set()
    indexed: set[str] = set()
    for plan in plans:
        if ANY_ROW.fullmatch(" ".join(str(plan.get("Query Text", "")).split())):
            continue
        for node, table in scans(plan, leading or {}):
            if table not in GROWING:
                continue
            if node in WALKS:
                sequential.add((node, table, " ".join(str(plan.get("Query Text", "")).split())))
            else:
                indexed.add(table)
    return sequential, indexed


def leading_columns(conn: psycopg.Connection[Any]) -> dict[str, str]:
    """The first column of every plain-column index of pgflow's and PGMQ's tables, by index name."""
    rows = conn.execute(
        "select c.relname, a.attname from pg_index as i"
        "  join pg_class as c on c.oid = i.indexrelid"
        "  join pg_attribute as a on a.attrelid = i.indrelid and a.attnum = i.indkey[0]"
        " where c.relnamespace in ('pgflow'::regnamespace, 'pgmq'::regnamespace) and i.indkey[0] <> 0"
    ).fetchall()
    return {str(index): str(column) for index, column in rows}


DISABLED_COST = 1e9
"""Above it, a plan holds a node its function's settings disable (PostgreSQL 15-17 add 1e10 to its
cost; 18 marks it ``Disabled``): priced that high, the statement is compiled by JIT on every call."""


def disabled_nodes(plans: list[dict[str, Any]]) -> set[tuple[str, str]]:
    """(node type, statement) of every node a plan could not avoid although its settings disable it."""
    found: set[tuple[str, str]] = set()

    def visit(node: dict[str, Any], text: str) -> None:
        if node.get("Disabled") is True or float(node.get("Total Cost", 0)) >= DISABLED_COST:
            found.add((f"{node['Node Type']} {node.get('Relation Name', '')}".strip(), text))
        for child in node.get("Plans", ()):
            visit(child, text)

    for plan in plans:
        visit(plan, " ".join(str(plan.get("Query Text", "")).split()))
    return {(node, text) for node, text in found if not ANY_ROW.fullmatch(text)}


def assert_index_access(plans: list[dict[str, Any]], leading: Mapping[str, str]) -> None:
    sequential, indexed = growing_table_scans(plans, leading)
    assert len(plans) > 30, "auto_explain reported almost no statements: the check would be vacuous"
    assert sequential == set()
    assert disabled_nodes(plans) == set()
    assert indexed >= {"runs", "step_states", "step_tasks", f"q_{FLOW}"}


def sent_by_the_session(text: str) -> bool:
    """A statement the check's session sent itself (psycopg binds its values as $1, $2...), not one a
    function ran: the statements PL/pgSQL runs name their variables instead."""
    return text.lstrip().lower().startswith("select ") and "$1" in text


def jit_compiled(plans: list[dict[str, Any]]) -> tuple[set[str], set[str]]:
    """(statements of the functions that JIT compiled, statements the session sent that it compiled)."""
    compiled = {" ".join(str(plan["Query Text"]).split()) for plan in plans if plan.get("JIT")}
    sent = {text for text in compiled if sent_by_the_session(text)}
    return compiled - sent, sent


def test_hot_path_plans_use_indexes(scratch: psycopg.Connection[Any]) -> None:
    plans = hot_path_plans(scratch)
    assert_index_access(plans, leading_columns(scratch))
    if scratch.execute("select pg_jit_available()").fetchone() == (True,):
        in_functions, sent = jit_compiled(plans)
        assert sent, "the session compiled none of its own statements: the JIT check would be vacuous"
        assert in_functions == set()


def test_the_check_sees_a_sequential_scan_and_a_full_index_walk() -> None:
    plan = {
        "Node Type": "Hash Join",
        "Query Text": "q",
        "Plans": [
            {"Node Type": "Seq Scan", "Relation Name": "step_tasks"},
            {"Node Type": "Index Scan", "Relation Name": "runs"},
            {"Node Type": "Index Scan", "Relation Name": "step_states", "Index Cond": "(run_id = $1)"},
            {"Node Type": "Seq Scan", "Relation Name": "steps"},
        ],
    }
    assert growing_table_scans([plan]) == (
        {("Seq Scan", "step_tasks", "q"), ("Full Index Scan", "runs", "q")},
        {"step_states"},
    )


def test_the_check_sees_a_walk_past_the_first_column_and_an_array_rescanned_per_row() -> None:
    """The plan a batch of runs once got on fresh tables: every started run from the (flow, status)
    index, and per run a probe matching the whole batch's array."""
    probe = {"Node Type": "Index Scan", "Relation Name": "step_states", "Index Name": "step_states_pkey"}
    plan = {
        "Node Type": "Nested Loop",
        "Query Text": "q",
        "Plans": [
            {
                "Node Type": "Index Scan",
                "Parent Relationship": "Outer",
                "Relation Name": "runs",
                "Index Name": "runs_flow_status_idx",
                "Index Cond": "(status = 'started'::text)",
            },
            {
                **probe,
                "Parent Relationship": "Inner",
                "Index Cond": "((run_id = r.run_id) AND (run_id = ANY ($1)))",
            },
        ],
    }
    leading = {"runs_flow_status_idx": "flow_slug", "step_states_pkey": "run_id"}
    assert growing_table_scans([plan], leading) == (
        {
            ("Index Scan without its first column", "runs", "q"),
            ("Array rescanned per outer row", "step_states", "q"),
        },
        set(),
    )
    driven_by_the_batch = {
        "Node Type": "Nested Loop",
        "Query Text": "q",
        "Plans": [
            {"Node Type": "Function Scan", "Parent Relationship": "Outer"},
            {**probe, "Parent Relationship": "Inner", "Index Cond": "(run_id = u.run_id)"},
        ],
    }
    outer_array = {**probe, "Index Cond": "(run_id = ANY ($1))"}
    assert growing_table_scans([driven_by_the_batch, outer_array], leading) == (set(), {"step_states"})


def test_the_check_sees_a_probe_that_leaves_the_rows_key_free() -> None:
    """The hand-off's task probe, planned on a new day's small partition: the queue's index by queue
    name alone (its first column) reads every task of the queue there."""
    by_queue = {
        "Node Type": "Index Scan",
        "Relation Name": "step_tasks_p20261202",
        "Index Name": "step_tasks_p20261202_queue_name_message_id_idx",
        "Index Cond": "(queue_name = $1)",
        "Query Text": "q",
    }
    by_message = {**by_queue, "Index Cond": "((queue_name = $1) AND (message_id = ANY ($2)))"}
    leading = {"step_tasks_p20261202_queue_name_message_id_idx": "queue_name"}
    assert growing_table_scans([by_queue, by_message], leading) == (
        {("Index Scan not by its row's key", "step_tasks", "q")},
        {"step_tasks"},
    )


def test_the_check_takes_a_queue_head_for_a_probe_only_under_a_limit() -> None:
    """The hand-off's look at the queue's first visible message walks the priority index for its
    ``LIMIT 1``; the same walk without a limit reads the whole queue."""
    head = {
        "Node Type": "Index Scan",
        "Relation Name": f"q_{FLOW}",
        "Index Name": f"q_{FLOW}_priority_idx",
        "Filter": "(vt <= clock_timestamp())",
    }
    limited = {"Node Type": "Limit", "Query Text": "q", "Plans": [{**head, "Parent Relationship": "Outer"}]}
    assert growing_table_scans([limited]) == (set(), {f"q_{FLOW}"})
    assert growing_table_scans([{**head, "Query Text": "q"}]) == (
        {("Full Index Scan", f"q_{FLOW}", "q")},
        set(),
    )


def test_the_check_sees_a_node_the_settings_disable() -> None:
    """Stalled recovery's read of every flow, a sequential scan under ``enable_seqscan = off``: on
    PostgreSQL 15 its cost of 1e10 had the statement compiled by JIT on each pass (0.2-0.4 s)."""
    scan = {"Node Type": "Seq Scan", "Relation Name": "flows", "Total Cost": 10000000016.6}
    plan = {"Node Type": "Aggregate", "Query Text": "q", "Total Cost": 10000000101.5, "Plans": [scan]}
    assert disabled_nodes([plan]) == {("Aggregate", "q"), ("Seq Scan flows", "q")}
    pg18 = {"Node Type": "Seq Scan", "Relation Name": "flows", "Total Cost": 16.6, "Disabled": True}
    assert disabled_nodes([{**pg18, "Query Text": "q"}]) == {("Seq Scan flows", "q")}
    assert disabled_nodes([{**scan, "Total Cost": 16.6, "Query Text": "q"}]) == set()


def test_the_check_sees_a_range_of_run_ids_driving_a_scan() -> None:
    """A batch's lowest and highest run ids bound its probes for partition pruning; as the only
    condition of a scan (an UPDATE joined to the batch, planned on small tables) they read every run
    in the range, matched against the batch row by row."""
    ranged = {
        "Node Type": "Bitmap Heap Scan",
        "Relation Name": "step_tasks",
        "Recheck Cond": "((run_id >= $20) AND (run_id <= $21))",
        "Query Text": "q",
    }
    ranged_index = {
        "Node Type": "Index Scan",
        "Relation Name": "runs",
        "Index Name": "runs_pkey",
        "Index Cond": "((run_id >= $20) AND (run_id <= $21))",
        "Query Text": "q",
    }
    probe = {**ranged_index, "Index Cond": "((run_id >= $20) AND (run_id <= $21) AND (run_id = i.run_id))"}
    leading = {"runs_pkey": "run_id"}
    assert growing_table_scans([ranged, ranged_index, probe], leading) == (
        {
            ("Index Scan not by its row's key", "step_tasks", "q"),
            ("Index Scan not by its row's key", "runs", "q"),
        },
        {"runs"},
    )
