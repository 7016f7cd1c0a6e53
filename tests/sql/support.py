"""Helpers for the SQL tests: build flows, start runs, claim, complete and inspect rows and queues.

Everything goes through the real ``pgflow`` SQL API and the real PGMQ tables on Django's connection.
Queries go through ``tests.support.db`` (jsonb decoded); ``q``, ``q1``, ``val`` and ``jb`` are its
``rows``, ``one``, ``value`` and ``jsonb`` under the short names these tests use.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import connection, transaction

from pgflow_django.runs.client import new_run_id
from tests.support.db import db_error as db_error
from tests.support.db import jsonb as jb
from tests.support.db import one as q1
from tests.support.db import refusal as refusal
from tests.support.db import rows as q
from tests.support.db import value as val

_ABSENT = object()


@contextmanager
def savepoint() -> Iterator[None]:
    with transaction.atomic():
        yield


# ---------------------------------------------------------------- definitions


def step(slug: str, *deps: str, **options: Any) -> dict[str, Any]:
    """A step definition for make_flow: ``step("b", "a", step_type="map", timeout=5)``."""
    return {"slug": slug, "deps": list(deps), **options}


_JSON_OPTS = {"required_input_pattern", "forbidden_input_pattern"}


def add_step(flow_slug: str, slug: str, deps: list[str] | None = None, **options: Any) -> dict[str, Any]:
    args = ["flow_slug => %s", "step_slug => %s"]
    params: list[Any] = [flow_slug, slug]
    if deps is not None:
        args.append("deps_slugs => %s::text[]")
        params.append(list(deps))
    for name, value in options.items():
        if name in _JSON_OPTS:
            args.append(f"{name} => %s::jsonb")
            params.append(None if value is None else jb(value))
        elif name in {"step_type", "when_unmet", "when_exhausted"}:
            args.append(f"{name} => %s::text")
            params.append(value)
        else:
            args.append(f"{name} => %s::int")
            params.append(value)
    return q1(f"select * from pgflow.add_step({', '.join(args)})", params)


def create_flow(flow_slug: str, **options: Any) -> dict[str, Any]:
    args = ["flow_slug => %s"]
    params: list[Any] = [flow_slug]
    for name, value in options.items():
        args.append(f"{name} => %s::int")
        params.append(value)
    return q1(f"select * from pgflow.create_flow({', '.join(args)})", params)


def make_flow(flow_slug: str, *steps: dict[str, Any], **flow_options: Any) -> str:
    """Create a flow and its steps in order; returns the slug."""
    create_flow(flow_slug, **flow_options)
    for definition in steps:
        opts = {k: v for k, v in definition.items() if k not in {"slug", "deps"}}
        add_step(flow_slug, definition["slug"], definition["deps"], **opts)
    return flow_slug


# ---------------------------------------------------------------- runs


def start(flow_slug: str, input: Any = None, run_id: uuid.UUID | None = None) -> uuid.UUID:
    """start_flow; returns the run id."""
    payload = {} if input is None else input
    row = q1(
        "select * from pgflow.start_flow(%s, %s::jsonb, %s::uuid)",
        [flow_slug, jb(payload), run_id],
    )
    return row["run_id"]


def old_run_id(days: int) -> uuid.UUID:
    """The id of a run started ``days`` ago (time-ordered, as pgflow makes them): tests that back-date a
    run's end start it with one, so a partitioned history files it where such a run would be."""
    return new_run_id(datetime.now(UTC) - timedelta(days=days))


def run(run_id: uuid.UUID) -> dict[str, Any]:
    return q1("select * from pgflow.runs where run_id = %s", [run_id])


def state(run_id: uuid.UUID, step_slug: str) -> dict[str, Any]:
    return q1("select * from pgflow.step_states where run_id = %s and step_slug = %s", [run_id, step_slug])


def states(run_id: uuid.UUID) -> dict[str, dict[str, Any]]:
    return {r["step_slug"]: r for r in q("select * from pgflow.step_states where run_id = %s", [run_id])}


def tasks(run_id: uuid.UUID, step_slug: str | None = None) -> list[dict[str, Any]]:
    if step_slug is None:
        return q(
            "select * from pgflow.step_tasks where run_id = %s order by step_slug, task_index",
            [run_id],
        )
    return q(
        "select * from pgflow.step_tasks where run_id = %s and step_slug = %s order by task_index",
        [run_id, step_slug],
    )


def task(run_id: uuid.UUID, step_slug: str, task_index: int = 0) -> dict[str, Any]:
    return q1(
        "select * from pgflow.step_tasks where run_id = %s and step_slug = %s and task_index = %s",
        [run_id, step_slug, task_index],
    )


# ---------------------------------------------------------------- queue


def qtable(flow_slug: str, prefix: str = "q") -> str:
    return str(val("select pgmq.format_table_name(%s, %s) as t", [flow_slug, prefix]))


def queue_messages(flow_slug: str) -> list[dict[str, Any]]:
    """Live messages of the flow's queue (any visibility), with vt offset from now in seconds."""
    table = qtable(flow_slug, "q")
    return q(
        f"select msg_id, vt, read_ct, message, "
        f"extract(epoch from vt - clock_timestamp())::float8 as vt_in "
        f'from pgmq."{table}" order by msg_id'
    )


def archived_messages(flow_slug: str) -> list[dict[str, Any]]:
    table = qtable(flow_slug, "a")
    return q(f'select msg_id, message, archived_at from pgmq."{table}" order by msg_id')


def live_ids(flow_slug: str) -> set[int]:
    return {m["msg_id"] for m in queue_messages(flow_slug)}


def archived_ids(flow_slug: str) -> set[int]:
    return {m["msg_id"] for m in archived_messages(flow_slug)}


def vt_in(flow_slug: str, msg_id: int) -> float:
    """Seconds until the message becomes visible (negative: visible now)."""
    table = qtable(flow_slug, "q")
    return float(
        val(
            f'select extract(epoch from vt - clock_timestamp())::float8 as s from pgmq."{table}" '
            f"where msg_id = %s",
            [msg_id],
        )
    )


def make_visible(flow_slug: str) -> None:
    table = qtable(flow_slug, "q")
    q(f"update pgmq.\"{table}\" set vt = clock_timestamp() - interval '1 second'")


def queue_exists(flow_slug: str) -> bool:
    return bool(
        val("select exists (select 1 from pgmq.list_queues() where queue_name = %s) as e", [flow_slug])
    )


# ---------------------------------------------------------------- tasks


def new_worker(flow_slug: str) -> uuid.UUID:
    worker_id = uuid.uuid4()
    q(
        "insert into pgflow.workers (worker_id, queue_name, function_name) values (%s, %s, 'tests')",
        [worker_id, flow_slug],
    )
    return worker_id


def start_tasks(
    flow_slug: str, msg_ids: list[int], worker_id: uuid.UUID | None = None
) -> list[dict[str, Any]]:
    """The claimed tasks of a plain flow's batch, through the claim a worker calls (queue, flow, ids,
    worker, no step selector), in message id order; the batch's other outcomes are left out."""
    worker = worker_id or new_worker(flow_slug)
    return q(
        "select c.flow_slug, c.run_id, c.step_slug, c.task_index, c.message_id, c.attempt, c.input"
        "  from pgflow.start_tasks(lower(%s), %s, %s::bigint[], %s::uuid, null) as c"
        " where c.outcome = 'claimed' order by c.message_id",
        [flow_slug, flow_slug, list(msg_ids), worker],
    )


def claim(
    flow_slug: str,
    worker_id: uuid.UUID | None = None,
    qty: int = 100,
    vt: int = 5,
    step_slug: str | None = None,
) -> list[dict[str, Any]]:
    """What a worker does: read visible messages with pgmq.read, then claim them with start_tasks
    (the five-argument claim).

    ``step_slug`` reads only that step's messages (pgmq.read's conditional filter on the body).
    Returns the claimed task records ordered by (step_slug, run_id, task_index)."""
    condition = {} if step_slug is None else {"step_slug": step_slug}
    msgs = q("select msg_id from pgmq.read(%s, %s, %s, %s::jsonb)", [flow_slug, vt, qty, jb(condition)])
    if not msgs:
        return []
    records = start_tasks(flow_slug, [m["msg_id"] for m in msgs], worker_id)
    return sorted(records, key=lambda r: (r["step_slug"], str(r["run_id"]), r["task_index"]))


def claim_one(flow_slug: str, step_slug: str | None = None) -> dict[str, Any]:
    records = claim(flow_slug, step_slug=step_slug)
    assert len(records) == 1, f"expected one claimed task, got {records}"
    return records[0]


def complete(rec: dict[str, Any], output: Any, attempt: int | None = None) -> str:
    return str(
        val(
            "select pgflow.complete_task(%s::uuid, %s, %s, %s, %s::jsonb) as outcome",
            [
                rec["run_id"],
                rec["step_slug"],
                rec["task_index"],
                rec["attempt"] if attempt is None else attempt,
                jb(output),
            ],
        )
    )


def fail(
    rec: dict[str, Any], error: str = "boom", attempt: int | None = None, retry_delay: int | None = None
) -> str:
    return str(
        val(
            "select pgflow.fail_task(%s::uuid, %s, %s, %s, %s, %s::int) as outcome",
            [
                rec["run_id"],
                rec["step_slug"],
                rec["task_index"],
                rec["attempt"] if attempt is None else attempt,
                error,
                retry_delay,
            ],
        )
    )


def run_step(flow_slug: str, step_slug: str, output: Any) -> None:
    """Claim every visible task of one step and complete each with ``output`` (callable(index) or value)."""
    records = claim(flow_slug, step_slug=step_slug)
    assert records, f"no claimable task for {step_slug}"
    for rec in records:
        value = output(rec["task_index"]) if callable(output) else output
        assert complete(rec, value) == "completed"


def backdate_started(run_id: uuid.UUID, step_slug: str, seconds: float, task_index: int = 0) -> None:
    q(
        "update pgflow.step_tasks set started_at = now() - make_interval(secs => %s) "
        "where run_id = %s and step_slug = %s and task_index = %s",
        [seconds, run_id, step_slug, task_index],
    )


def active_tasks(run_id: uuid.UUID) -> list[dict[str, Any]]:
    return q(
        "select * from pgflow.step_tasks where run_id = %s and status in ('queued', 'started')",
        [run_id],
    )


def other_connection() -> Any:
    """A separate autocommit psycopg connection to the test database (for LISTEN/NOTIFY checks)."""
    import psycopg

    settings = connection.settings_dict
    return psycopg.connect(
        dbname=settings["NAME"],
        user=settings["USER"] or None,
        password=settings["PASSWORD"] or None,
        host=settings["HOST"] or None,
        port=settings["PORT"] or None,
        autocommit=True,
    )


def execute_ok(query: str, params: Any = None) -> None:
    with connection.cursor() as cursor:
        cursor.execute(query, params)


def shape_step(
    slug: str,
    *deps: str,
    step_type: str = "single",
    when_unmet: str = "skip",
    when_exhausted: str = "fail",
    required_input_pattern: Any = None,
    forbidden_input_pattern: Any = None,
    **options: Any,
) -> dict[str, Any]:
    opts = {"max_attempts": None, "base_delay": None, "timeout": None, "start_delay": None}
    opts.update(options)
    return {
        "slug": slug,
        "step_type": step_type,
        "deps": sorted(deps),
        "when_unmet": when_unmet,
        "when_exhausted": when_exhausted,
        "required_input_pattern": required_input_pattern,
        "forbidden_input_pattern": forbidden_input_pattern,
        "options": opts,
    }


def shape(
    *steps: dict[str, Any], max_attempts: int = 3, base_delay: int = 1, timeout: int = 60
) -> dict[str, Any]:
    return {
        "options": {"max_attempts": max_attempts, "base_delay": base_delay, "timeout": timeout},
        "steps": list(steps),
    }


def compile_flow(
    flow_slug: str, flow_shape: dict[str, Any], allow_recompile: bool = False, on_change: str | None = None
) -> dict[str, Any]:
    """``ensure_flow_compiled``'s answer without its generation (a fresh number per compilation);
    ``allow_recompile`` is the explicit ``on_change = 'replace'``."""
    answer = dict(
        val(
            "select pgflow.ensure_flow_compiled(%s, %s::jsonb, %s::text) as r",
            [flow_slug, jb(flow_shape), on_change or ("replace" if allow_recompile else "refuse")],
        )
    )
    answer.pop("generation", None)
    return answer


def complete_many(
    items: list[tuple[dict[str, Any], Any]], attempts: dict[int, int] | None = None
) -> list[dict[str, Any]]:
    """complete_tasks over (record, output) pairs; returns its rows."""
    payload = [
        {
            "run_id": str(rec["run_id"]),
            "step_slug": rec["step_slug"],
            "task_index": rec["task_index"],
            "attempt": rec["attempt"] if attempts is None else attempts.get(i, rec["attempt"]),
            "output": output,
        }
        for i, (rec, output) in enumerate(items)
    ]
    return q("select * from pgflow.complete_tasks(%s::jsonb)", [jb(payload)])


def requeue_stalled() -> dict[str, int]:
    """requeue_stalled_tasks() as {outcome: count} (columns read by position)."""
    result: dict[str, int] = {}
    for row in q("select * from pgflow.requeue_stalled_tasks()"):
        outcome, count = list(row.values())[:2]
        result[str(outcome)] = int(count)
    return result


def wake_waits() -> dict[str, int]:
    """One wait pass (``pgflow.wake_waits``): waits ended, by outcome."""
    return {r["outcome"]: r["wait_count"] for r in q("select * from pgflow.wake_waits()")}


def requeued_total(result: dict[str, int]) -> int:
    return sum(v for k, v in result.items() if "requeue" in k)


def assert_visible_in(flow_slug: str, msg_id: int, seconds: float) -> None:
    """The message's visibility is ``seconds`` from now (set moments ago: allow 0.6 s of elapsed time)."""
    actual = vt_in(flow_slug, msg_id)
    assert seconds - 0.6 <= actual <= seconds + 0.05, (
        f"message {msg_id} visible in {actual:.2f}s, want {seconds}s"
    )


# ---------------------------------------------------------------- queue identity (issue 4)


def claim_at(
    queue_name: str, flow_slug: str, msg_ids: list[int], worker_id: uuid.UUID | None = None
) -> list[dict[str, Any]]:
    """The queue-aware claim ``pgflow.start_tasks(queue_name, flow_slug, msg_ids, worker_id)``: its
    claim_record rows (one per distinct message id), ordered by message id."""
    worker = worker_id or new_worker(queue_name)
    return sorted(
        q(
            "select * from pgflow.start_tasks(%s, %s, %s::bigint[], %s::uuid)",
            [queue_name, flow_slug, list(msg_ids), worker],
        ),
        key=lambda r: r["message_id"],
    )


def read_ids(queue_name: str, qty: int = 100, vt: int = 5) -> list[int]:
    """What a worker reads first: ``pgmq.read`` of the visible messages (their ids, in order)."""
    return sorted(m["msg_id"] for m in q("select msg_id from pgmq.read(%s, %s, %s)", [queue_name, vt, qty]))


def send_raw(queue_name: str, body: Any, *, raw_json: bool = False) -> int:
    """Send a message straight to a PGMQ queue (as an application would); ``body=None`` sends SQL NULL,
    ``raw_json=True`` takes ``body`` as JSON text. Returns its message id."""
    if body is None:
        return int(val("select pgmq.send(%s, null::jsonb) as id", [queue_name]))
    text = body if raw_json else jb(body)
    return int(val("select pgmq.send(%s, %s::jsonb) as id", [queue_name, text]))


def message_row(queue_name: str, msg_id: int) -> dict[str, Any] | None:
    """The live message (with ``vt_in`` seconds until visible), or None when it is not in the queue."""
    table = qtable(queue_name, "q")
    found = q(
        f"select msg_id, read_ct, vt, message, "
        f"extract(epoch from vt - clock_timestamp())::float8 as vt_in "
        f'from pgmq."{table}" where msg_id = %s',
        [msg_id],
    )
    return found[0] if found else None


def queue_snapshot(queue_name: str) -> dict[str, Any]:
    """Everything a queue operation can change: live messages (id, vt, read count) and archived ids."""
    return {
        "live": {m["msg_id"]: (m["vt"], m["read_ct"]) for m in queue_messages(queue_name)},
        "archived": archived_ids(queue_name),
    }


def pause_row(flow_slug: str, step_slug: str = "") -> dict[str, Any] | None:
    found = q(
        "select * from pgflow.worker_pauses where flow_slug = %s and step_slug = %s", [flow_slug, step_slug]
    )
    return found[0] if found else None


def table_counts() -> dict[str, int]:
    """Row counts of every pgflow and pgmq table (queues, archives and pgmq.meta included)."""
    names = [
        r["name"]
        for r in q(
            "select format('%I.%I', n.nspname, c.relname) as name from pg_class c "
            "join pg_namespace n on n.oid = c.relnamespace "
            "where n.nspname in ('pgflow', 'pgmq') and c.relkind in ('r', 'p') order by 1"
        )
    ]
    return {name: int(val(f"select count(*) as n from {name}")) for name in names}


def pgmq_relations() -> set[str]:
    """Names of the tables and sequences in schema pgmq (queue, archive and message id sequences)."""
    return {
        r["relname"]
        for r in q(
            "select c.relname from pg_class c where c.relnamespace = 'pgmq'::regnamespace "
            "and c.relkind in ('r', 'p', 'S')"
        )
    }


def meta_names(queue_name: str) -> list[str]:
    """pgmq.meta spellings that address ``queue_name``'s tables (case-insensitive match)."""
    return [
        r["queue_name"]
        for r in q(
            "select queue_name from pgmq.meta where lower(queue_name) = lower(%s) order by queue_name",
            [queue_name],
        )
    ]


@dataclass(frozen=True)
class Twins:
    """Runs of two flows ``f`` and ``g`` with the same steps, whose first messages carry the same ids."""

    f: uuid.UUID
    g: uuid.UUID
    ids: list[int]
    """The message ids of each run's first tasks: the same in both queues (both start at 1)."""


def start_twins(*steps: dict[str, Any], input: Any = None, **flow_options: Any) -> Twins:
    """Flows ``f`` and ``g`` with these steps and one run each; asserts their queues hold the same ids."""
    make_flow("f", *steps, **flow_options)
    make_flow("g", *steps, **flow_options)
    run_f = start("f", input)
    run_g = start("g", input)
    ids_f = sorted(t["message_id"] for t in tasks(run_f))
    ids_g = sorted(t["message_id"] for t in tasks(run_g))
    assert ids_f, "the twins must have queued tasks"
    assert ids_f == ids_g == list(range(1, len(ids_f) + 1)), (
        f"both queues number their messages from 1: f has {ids_f}, g has {ids_g}"
    )
    assert sorted(live_ids("f")) == sorted(live_ids("g")) == ids_f
    return Twins(run_f, run_g, ids_f)


def task_by_message(run_id: uuid.UUID, msg_id: int) -> dict[str, Any]:
    return q1("select * from pgflow.step_tasks where run_id = %s and message_id = %s", [run_id, msg_id])


def claim_all(flow_slug: str, vt: int = 5) -> list[dict[str, Any]]:
    """Read the flow's queue and claim what was read through the queue-aware claim (all must be
    claimed); the claim records ordered by message id."""
    ids = read_ids(flow_slug.lower(), vt=vt)
    records = claim_at(flow_slug.lower(), flow_slug, ids)
    assert [r["outcome"] for r in records] == ["claimed"] * len(ids), records
    return records


def unarchive(queue_name: str, msg_id: int) -> None:
    """Put an archived message back into its queue, visible now (a message a terminal task left behind)."""
    qt, at = qtable(queue_name, "q"), qtable(queue_name, "a")
    q(
        f'insert into pgmq."{qt}" (msg_id, read_ct, enqueued_at, last_read_at, vt, message, headers) '
        f"overriding system value "
        f"select msg_id, read_ct, enqueued_at, last_read_at, clock_timestamp(), message, headers "
        f'from pgmq."{at}" where msg_id = %s',
        [msg_id],
    )
    q(f'delete from pgmq."{at}" where msg_id = %s', [msg_id])


def claim_items(records: Iterable[dict[str, Any]]) -> str:
    """The JSON array of claims (task key and attempt) that release_tasks and return_unstarted_tasks take."""
    return json.dumps(
        [
            {
                "run_id": str(r["run_id"]),
                "step_slug": r["step_slug"],
                "task_index": r["task_index"],
                "attempt": r["attempt"],
            }
            for r in records
        ]
    )
