"""Every SQL entry point that takes an identifier refuses hostile ones (tests/hostile.py) with an error,
or answers "nothing there" without changing anything; no call creates ``public.pwned``.

An entry point that raises has no side effect by statement atomicity; one that returns is checked by
the ``unchanged`` snapshot (row counts of every pgflow and pgmq table, PGMQ relations and metadata)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from django.db import DatabaseError, connection, transaction

from tests.hostile import HOSTILE, pwned_exists
from tests.sql.support import make_flow, q, shape, shape_step, start, step, task

VICTIM = "victim"

ERROR = "error"


@dataclass(frozen=True)
class EntryPoint:
    name: str
    sql: str
    params: Callable[[str, dict[str, Any]], list[Any]]
    allowed: Callable[[Any], bool] | str = ERROR
    """ERROR: must raise; else it may raise, or return a first column (None: no rows; '' for void)
    that this predicate accepts, meaning "nothing there"."""
    empty_is_default: bool = False
    """'' makes a valid call here (a flow's whole subscription; a plain '7 days'), so it is skipped."""


def _shape_with_step(name: str) -> str:
    return json.dumps(shape(shape_step(name)))


ENTRY_POINTS = [
    EntryPoint("create_flow", "select * from pgflow.create_flow(%s)", lambda n, c: [n]),
    EntryPoint("add_step flow", "select * from pgflow.add_step(%s, 'a')", lambda n, c: [n]),
    EntryPoint("add_step step", "select * from pgflow.add_step(%s, %s)", lambda n, c: [VICTIM, n]),
    EntryPoint(
        "add_step dependency",
        "select * from pgflow.add_step(%s, 'zz', array[%s])",
        lambda n, c: [VICTIM, n],
    ),
    EntryPoint("start_flow", "select * from pgflow.start_flow(%s, '{}'::jsonb)", lambda n, c: [n]),
    EntryPoint("start_flows", "select * from pgflow.start_flows(%s, '[{}]'::jsonb)", lambda n, c: [n]),
    EntryPoint(
        "start_tasks queue_name",
        "select * from pgflow.start_tasks(%s, %s, %s::bigint[], gen_random_uuid())",
        lambda n, c: [n, VICTIM, [c["msg"]]],
    ),
    EntryPoint(
        "start_tasks legacy flow_slug",
        "select * from pgflow.start_tasks(%s, %s::bigint[], gen_random_uuid())",
        lambda n, c: [n, [c["msg"]]],
    ),
    EntryPoint(
        "complete_task step_slug",
        "select pgflow.complete_task(%s, %s, 0, 1, '1'::jsonb)",
        lambda n, c: [c["run_id"], n],
        allowed=lambda outcome: outcome == "stale",
    ),
    EntryPoint(
        "fail_task step_slug",
        "select pgflow.fail_task(%s, %s, 0, 1, 'x')",
        lambda n, c: [c["run_id"], n],
        allowed=lambda outcome: outcome == "stale",
    ),
    EntryPoint("delete_flow_and_data", "select pgflow.delete_flow_and_data(%s)", lambda n, c: [n]),
    EntryPoint(
        "ensure_flow_compiled flow_slug",
        "select pgflow.ensure_flow_compiled(%s, %s::jsonb)",
        lambda n, c: [n, _shape_with_step("a")],
    ),
    EntryPoint(
        "ensure_flow_compiled step slug",
        "select pgflow.ensure_flow_compiled('fresh_flow', %s::jsonb)",
        lambda n, c: [_shape_with_step(n)],
    ),
    EntryPoint(
        "ensure_flow_compiled dependency",
        "select pgflow.ensure_flow_compiled('fresh_flow', %s::jsonb)",
        lambda n, c: [json.dumps(shape(shape_step("a"), shape_step("b", n)))],
    ),
    EntryPoint("pause_subscription flow", "select * from pgflow.pause_subscription(%s)", lambda n, c: [n]),
    EntryPoint(
        "pause_subscription step",
        "select * from pgflow.pause_subscription(%s, %s)",
        lambda n, c: [VICTIM, n],
        empty_is_default=True,
    ),
    EntryPoint(
        "resume_subscription",
        "select pgflow.resume_subscription(%s, %s)",
        lambda n, c: [n, n],
        allowed=lambda resumed: resumed is False,
    ),
    EntryPoint(
        "subscription_pause",
        "select (pgflow.subscription_pause(%s, %s)).flow_slug",
        lambda n, c: [n, n],
        allowed=lambda pause: pause is None,
    ),
    EntryPoint(
        "provision_generated_queue",
        "select pgflow.provision_generated_queue(%s, %s)",
        lambda n, c: [VICTIM, n],
    ),
    EntryPoint(
        "set_vt_batch",
        "select * from pgflow.set_vt_batch(%s, %s::bigint[], array[0], 'set')",
        lambda n, c: [n, [c["msg"]]],
    ),
    EntryPoint(
        "archive_task_messages",
        "select pgflow.archive_task_messages(array[%s], %s::bigint[])",
        lambda n, c: [n, [c["msg"]]],
        allowed=lambda result: result in (None, ""),
    ),
    EntryPoint("resolve_queue_spelling", "select pgflow.resolve_queue_spelling(%s)", lambda n, c: [n]),
    EntryPoint(
        "queue_objects_problem",
        "select pgflow.queue_objects_problem(%s)",
        lambda n, c: [n],
        allowed=lambda problem: isinstance(problem, str) and "missing" in problem,
    ),
    EntryPoint(
        "flow_shape",
        "select pgflow.flow_shape(%s)",
        lambda n, c: [n],
        allowed=lambda found: found in (None, '{"steps": []}', {"steps": []}),
    ),
    EntryPoint(
        "check_flow_queues",
        "select pgflow.check_flow_queues(%s)",
        lambda n, c: [n],
        allowed=lambda result: result in (None, ""),
    ),
    EntryPoint(
        "prune_data_older_than interval",
        "select * from pgflow.prune_data_older_than(%s::interval)",
        lambda n, c: [f"7 days{n}"],
        empty_is_default=True,
    ),
    EntryPoint(
        "is_valid_slug",
        "select pgflow.is_valid_slug(%s)",
        lambda n, c: [n],
        allowed=lambda valid: valid is False,
    ),
    EntryPoint(
        "is_valid_queue_name",
        "select pgflow.is_valid_queue_name(%s)",
        lambda n, c: [n],
        allowed=lambda valid: valid is False,
    ),
]


def _outcome(entry: EntryPoint, params: list[Any]) -> tuple[str, Any]:
    """("error", message) or ("result", first column of the first row, None when no rows)."""
    try:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(entry.sql, params)
            row = cursor.fetchone() if cursor.description is not None else None
            return "result", None if row is None else row[0]
    except DatabaseError as exc:
        return ERROR, str(exc).strip()


@pytest.mark.parametrize("entry", ENTRY_POINTS, ids=[e.name for e in ENTRY_POINTS])
def test_hostile_identifiers_are_refused_without_side_effects(
    entry: EntryPoint, unchanged: Callable[[], Callable[[], None]]
) -> None:
    make_flow(VICTIM, step("a"), step("b", "a"))
    run_id = start(VICTIM)
    context = {"run_id": run_id, "msg": task(run_id, "a")["message_id"]}
    check = unchanged()
    surprises = []
    for name in HOSTILE:
        if name == "" and entry.empty_is_default:
            continue
        kind, value = _outcome(entry, entry.params(name, context))
        ok = bool(value) if kind == ERROR else callable(entry.allowed) and entry.allowed(value)
        if not ok:
            surprises.append(f"{name!r}: {kind} {value!r}")
        with connection.cursor() as cursor:
            assert not pwned_exists(cursor), f"{entry.name}({name!r}) created public.pwned"
    assert not surprises, f"{entry.name} accepted hostile input:\n" + "\n".join(surprises)
    check()
    assert q("select flow_slug from pgflow.flows") == [{"flow_slug": VICTIM}]


def test_errors_name_the_problem_in_one_statement() -> None:
    """Spot checks that refusals are clear, not incidental syntax errors."""
    make_flow(VICTIM, step("a"))
    name = HOSTILE[0]
    messages = {
        entry.name: _outcome(entry, entry.params(name, {"run_id": uuid.uuid4(), "msg": 1}))[1]
        for entry in ENTRY_POINTS
        if entry.name in {"create_flow", "start_flow", "delete_flow_and_data", "pause_subscription flow"}
    }
    assert "syntax error" not in " ".join(messages.values()).lower(), messages
    assert "does not exist" in messages["start_flow"] or "not" in messages["start_flow"], messages
    assert "does not exist" in messages["delete_flow_and_data"], messages
    assert "does not exist" in messages["pause_subscription flow"], messages
