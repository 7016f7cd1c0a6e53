"""Helpers of the upgrade tests: baseline (0002) data loaded through that release's SQL API, the hazards
the upgrade audit must catch (each with its documented repair), scratch databases at 0002, and a state
snapshot (catalog, row counts, sequences, recorded migrations) that proves a refused upgrade changed
nothing.

Every helper takes a DB-API cursor, so the same fixtures load into the test database (through Django's
connection, migrated back to 0002) and into scratch databases (psycopg, any PGMQ version). Flows and
queues made here all start with ``upg`` (any case), so ``purge`` can remove exactly them.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import psycopg

from pgflow_django.db.catalog import snapshot
from pgflow_django.sql import migration_sql
from tests.support import db, scratch
from tests.support.scratch import server_params as server_params

Cursor = Any
WORKER = uuid.UUID("00000000-0000-4000-8000-00000000a0d1")
ORDERS = "upg_orders"
MIXED = "UpgMixed"
"""A flow whose PGMQ metadata keeps its mixed-case spelling, as the baseline release created it."""


def rows(cursor: Cursor, query: str, params: Any = None) -> list[tuple[Any, ...]]:
    """``tests.support.db.tuples`` on ``cursor``, cursor first as every helper here takes it."""
    return db.tuples(query, params, on=cursor)


def value(cursor: Cursor, query: str, params: Any = None) -> Any:
    """``tests.support.db.value`` on ``cursor``."""
    return db.value(query, params, on=cursor)


def body(flow_slug: str, step_slug: str, task_index: int = 0) -> str:
    """A pgflow-shaped message body (as jsonb text)."""
    return json.dumps(
        {
            "flow_slug": flow_slug,
            "run_id": str(uuid.uuid4()),
            "step_slug": step_slug,
            "task_index": task_index,
        }
    )


# ------------------------------------------------------------------ the baseline release's API (0002)


def create_flow(cursor: Cursor, flow_slug: str, *steps: tuple[str, list[str], str]) -> None:
    """``create_flow`` then ``add_step`` for each (slug, deps, step_type)."""
    cursor.execute("select pgflow.create_flow(%s)", [flow_slug])
    for step_slug, deps, step_type in steps:
        cursor.execute(
            "select pgflow.add_step(%s, %s, %s::text[], step_type => %s)",
            [flow_slug, step_slug, deps, step_type],
        )


def start(cursor: Cursor, flow_slug: str, payload: Any) -> uuid.UUID:
    run_id = value(
        cursor, "select run_id from pgflow.start_flow(%s, %s::jsonb)", [flow_slug, json.dumps(payload)]
    )
    return run_id if isinstance(run_id, uuid.UUID) else uuid.UUID(str(run_id))


def claim_legacy(cursor: Cursor, flow_slug: str, step_slug: str | None = None) -> list[tuple[Any, ...]]:
    """What a baseline worker does: ``pgmq.read`` on the flow's queue, then the 3-argument claim.

    Returns (run_id, step_slug, task_index, message_id, attempt) of the claimed tasks.
    """
    condition = json.dumps({} if step_slug is None else {"step_slug": step_slug})
    ids = [
        row[0]
        for row in rows(
            cursor, "select msg_id from pgmq.read(%s, 30, 100, %s::jsonb)", [flow_slug, condition]
        )
    ]
    if not ids:
        return []
    return rows(
        cursor,
        "select run_id, step_slug, task_index, message_id, attempt"
        " from pgflow.start_tasks(%s, %s::bigint[], %s::uuid) order by step_slug, run_id, task_index",
        [flow_slug, ids, WORKER],
    )


def complete(cursor: Cursor, task: tuple[Any, ...], output: Any) -> str:
    run_id, step_slug, task_index, _, attempt = task
    return str(
        value(
            cursor,
            "select pgflow.complete_task(%s::uuid, %s, %s, %s, %s::jsonb)",
            [str(run_id), step_slug, task_index, attempt, json.dumps(output)],
        )
    )


def load_normal(cursor: Cursor) -> None:
    """Ordinary baseline data: a map flow with a run mid-way (tasks completed, started and queued), a
    run whose first task is claimed, a fresh run, a finished task without a message id, and a flow
    whose PGMQ metadata spells it in mixed case ('UpgMixed': legal before 0003)."""
    create_flow(
        cursor,
        ORDERS,
        ("validate", [], "single"),
        ("lines", ["validate"], "map"),
        ("charge", ["validate"], "single"),
    )
    first = start(cursor, ORDERS, {"order": 1})
    start(cursor, ORDERS, {"order": 2})
    validate = next(task for task in claim_legacy(cursor, ORDERS, "validate") if task[0] == first)
    assert complete(cursor, validate, [10, 20]) == "completed"
    started = claim_legacy(cursor, ORDERS, "lines")
    assert len(started) == 2
    complete(cursor, started[0], 11)
    # A finished task without a queue message: kept nullable by 0003 (cleanup tests rely on it).
    cursor.execute(
        "update pgflow.step_tasks set message_id = null where run_id = %s and step_slug = 'validate'",
        [str(first)],
    )
    start(cursor, ORDERS, {"order": 3})
    create_flow(cursor, MIXED, ("first", [], "single"))
    start(cursor, MIXED, {"mixed": True})


# ------------------------------------------------------------------ hazards the audit must catch


@dataclass(frozen=True)
class Hazard:
    """Baseline data 0003 cannot convert, the checks reporting it, and the repair docs/upgrading.md gives."""

    name: str
    checks: frozenset[str]
    load: Callable[[Cursor], None]
    repair: Callable[[Cursor], None]


def _duplicate_identities(cursor: Cursor) -> None:
    """A queue dropped and created again restarts its message ids; a finished task still holds id 1."""
    create_flow(cursor, "upg_dup", ("only", [], "single"))
    start(cursor, "upg_dup", {})
    (task,) = claim_legacy(cursor, "upg_dup")
    complete(cursor, task, "done")
    cursor.execute("select pgmq.drop_queue('upg_dup')")
    cursor.execute("select pgflow.create_flow('upg_dup')")
    start(cursor, "upg_dup", {})


def _repair_duplicate_identities(cursor: Cursor) -> None:
    cursor.execute(
        "update pgflow.step_tasks set message_id = null where flow_slug = 'upg_dup'"
        " and status in ('completed', 'failed', 'skipped', 'cancelled')"
    )


def _unmatched_message(cursor: Cursor) -> None:
    """A pgflow-shaped message that no task knows, sent to a flow's queue by something else."""
    cursor.execute("select pgmq.send(%s, %s::jsonb)", [ORDERS, body(ORDERS, "validate")])


def _repair_unmatched_message(cursor: Cursor) -> None:
    cursor.execute(
        "select pgmq.archive(%s, q.msg_id) from pgmq.q_upg_orders as q"
        " where not exists (select 1 from pgflow.step_tasks as t"
        "  where t.flow_slug = %s and t.message_id = q.msg_id)",
        [ORDERS, ORDERS],
    )


def _missing_archive(cursor: Cursor) -> None:
    cursor.execute("select pgmq.create('upg_loose')")
    cursor.execute("drop table pgmq.a_upg_loose")


def _repair_missing_archive(cursor: Cursor) -> None:
    cursor.execute("select pgmq.create('upg_loose')")


def _missing_flow_queue(cursor: Cursor) -> None:
    create_flow(cursor, "upg_gone", ("only", [], "single"))
    cursor.execute("select pgmq.drop_queue('upg_gone')")


def _repair_missing_flow_queue(cursor: Cursor) -> None:
    cursor.execute("select pgflow.create_flow('upg_gone')")


def _alias_queue(cursor: Cursor) -> None:
    """'UPG_ORDERS' next to 'upg_orders': one set of tables, two metadata rows."""
    cursor.execute("select pgmq.create('UPG_ORDERS')")


def _repair_alias_queue(cursor: Cursor) -> None:
    cursor.execute("delete from pgmq.meta where queue_name = 'UPG_ORDERS'")


def _invalid_slugs(cursor: Cursor) -> None:
    create_flow(cursor, "upg_legacy_", ("_first", [], "single"), ("a__b", [], "single"))
    start(cursor, "upg_legacy_", {})


def _repair_invalid_slugs(cursor: Cursor) -> None:
    cursor.execute("select pgflow.delete_flow_and_data('upg_legacy_')")


def _case_duplicate_steps(cursor: Cursor) -> None:
    create_flow(cursor, "upg_steps", ("Charge", [], "single"), ("charge", [], "single"))


def _repair_case_duplicate_steps(cursor: Cursor) -> None:
    cursor.execute("select pgflow.delete_flow_and_data('upg_steps')")


def _case_duplicate_flows(cursor: Cursor) -> None:
    """'UpgCase' and 'upgcase': create_flow refuses the second while the first one's queue exists."""
    create_flow(cursor, "UpgCase", ("only", [], "single"))
    cursor.execute("select pgmq.drop_queue('UpgCase')")
    create_flow(cursor, "upgcase", ("only", [], "single"))


def _repair_case_duplicate_flows(cursor: Cursor) -> None:
    cursor.execute("select pgflow.delete_flow_and_data('UpgCase')")


HAZARDS: tuple[Hazard, ...] = (
    Hazard(
        "duplicate_identities",
        frozenset({"duplicate_message_identities"}),
        _duplicate_identities,
        _repair_duplicate_identities,
    ),
    Hazard(
        "unmatched_message",
        frozenset({"unmatched_active_messages"}),
        _unmatched_message,
        _repair_unmatched_message,
    ),
    Hazard(
        "missing_archive", frozenset({"missing_queue_objects"}), _missing_archive, _repair_missing_archive
    ),
    Hazard(
        "missing_flow_queue",
        frozenset({"flows_without_default_queue"}),
        _missing_flow_queue,
        _repair_missing_flow_queue,
    ),
    Hazard(
        "alias_queue",
        frozenset({"case_alias_queues", "flows_without_default_queue"}),
        _alias_queue,
        _repair_alias_queue,
    ),
    Hazard(
        "invalid_slugs",
        frozenset({"invalid_flow_slugs", "invalid_step_slugs"}),
        _invalid_slugs,
        _repair_invalid_slugs,
    ),
    Hazard(
        "case_duplicate_steps",
        frozenset({"case_duplicate_step_slugs"}),
        _case_duplicate_steps,
        _repair_case_duplicate_steps,
    ),
    Hazard(
        "case_duplicate_flows",
        frozenset({"case_duplicate_flow_slugs", "queue_names_of_another_flow"}),
        _case_duplicate_flows,
        _repair_case_duplicate_flows,
    ),
)


def purge(cursor: Cursor) -> None:
    """Remove every flow and queue these fixtures make, with plain SQL valid at 0002 and after 0003.

    Queues go by dropping their tables and metadata rows directly: ``pgmq.drop_queue`` on a case alias
    would drop the tables another spelling still names.
    """
    pattern = "upg%"
    for table in ("step_tasks", "step_states", "runs", "deps", "steps"):
        cursor.execute(f"delete from pgflow.{table} where lower(flow_slug) like %s", [pattern])
    if value(cursor, "select to_regclass('pgflow.worker_pauses') is not null"):
        cursor.execute("delete from pgflow.worker_pauses where lower(flow_slug) like %s", [pattern])
    cursor.execute("delete from pgflow.workers where lower(queue_name) like %s", [pattern])
    cursor.execute("delete from pgflow.flows where lower(flow_slug) like %s", [pattern])
    statements = rows(
        cursor,
        "select format('drop table pgmq.%%I', c.relname) from pg_class as c"
        " where c.relnamespace = 'pgmq'::regnamespace and c.relkind in ('r', 'p')"
        " and (c.relname like %s or c.relname like %s)",
        ["q\\_" + pattern, "a\\_" + pattern],
    )
    for (statement,) in statements:
        cursor.execute(statement)
    cursor.execute("delete from pgmq.meta where lower(queue_name) like %s", [pattern])


# ------------------------------------------------------------------ "nothing changed"


def state(cursor: Cursor) -> dict[str, Any]:
    """Catalog of schemas pgflow and pgmq, row counts of all their tables, sequence positions and the
    recorded pgflow migrations: equal before and after means the database is unchanged."""
    tables = rows(
        cursor,
        "select format('%I.%I', n.nspname, c.relname) from pg_class c"
        " join pg_namespace n on n.oid = c.relnamespace"
        " where n.nspname in ('pgflow', 'pgmq') and c.relkind in ('r', 'p') order by 1",
    )
    counts = {name: value(cursor, f"select count(*) from {name}") for (name,) in tables}
    sequences = {
        name: rows(cursor, f"select last_value, is_called from {name}")[0]
        for (name,) in rows(
            cursor,
            "select format('%I.%I', n.nspname, c.relname) from pg_class c"
            " join pg_namespace n on n.oid = c.relnamespace"
            " where n.nspname = 'pgmq' and c.relkind = 'S' order by 1",
        )
    }
    recorded = (
        rows(cursor, "select name from django_migrations where app = 'pgflow' order by name")
        if value(cursor, "select to_regclass('public.django_migrations') is not null")
        else []
    )
    return {
        "catalog": {schema: snapshot(cursor, schema) for schema in ("pgflow", "pgmq")},
        "rows": counts,
        "sequences": sequences,
        "migrations": recorded,
    }


# ------------------------------------------------------------------ scratch databases


@contextmanager
def scratch_database(
    params: dict[str, Any], pgmq_sql: str | None = None
) -> Iterator[psycopg.Connection[Any]]:
    """A new database on the same server with PGMQ (``pgmq_sql``, else as migration 0001 installs it)
    and the baseline release (the frozen 0002 delta); dropped afterwards. The connection autocommits."""
    with scratch.scratch_database(
        "upgrade", params, migration_sql("0002_core.sql"), pgmq_sql=pgmq_sql
    ) as conn:
        yield conn
