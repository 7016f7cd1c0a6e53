"""Poison inputs and failure paths against real worker processes, one per flow that the tests share
(issue 15, items 1 to 3).

- An input the worker cannot decode (an integer of 5,000 digits, nesting past Python's recursion
  limit) fails its own task at once, without a retry and with a one-line reason, while the healthy
  tasks claimed in the same batch run normally.
- Outputs are bounded where they enter: one at the depth limit completes and feeds its dependent (whose
  input SQL builds one level deeper); one past it fails at once, on both completion paths.
- A handler error or retry message holding NUL and a lone surrogate is recorded (escaped) on every
  attempt, so the retry policy runs its course instead of the task stalling until recovery.
- One JSON rule on both sides (issue 14, item 7): datetimes, decimals and UUIDs in a run input and in
  a handler output are stored as the strings DjangoJSONEncoder makes of them.
- SystemExit, KeyboardInterrupt, CancelledError and GeneratorExit out of a handler fail the attempt
  like any exception; the worker keeps running.
"""

from __future__ import annotations

import datetime
import decimal
import json
import uuid
from typing import Any

import pytest

from pgflow_django import start_flow
from pgflow_django.runs.encoding import MAX_JSON_DEPTH
from tests import ledger
from tests.acceptance.faults import FAST, Rig, alive

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

ESCAPED_ERROR = "bad \\u0000 byte and lone \\ud800 surrogate"
"""``tests/ledger_flows.POISON_ERROR`` as recorded: both characters as text escapes."""
HUGE_INTEGER = "9" * 5000
DEEP_INPUT = "[" * 5000 + "]" * 5000
"""Accepted by jsonb, beyond what json.loads decodes on Python 3.11 and 3.12 (about 990 and 1,500)."""
WORKER = ("--concurrency", "16", "--batch-size", "16", *FAST)
"""The options of each flow's worker, which the module's tests share: a batch of 16 puts the poisoned
inputs among healthy neighbours."""


def _start_raw(rig: Rig, flow: str, inputs: list[str]) -> list[str]:
    """Start one run per JSON text in one statement, through SQL (the engine's API refuses these)."""
    return [
        str(row[0])
        for row in rig.db.rows(
            "select run_id from pgflow.start_flows(%s, %s::jsonb)", [flow, "[" + ",".join(inputs) + "]"]
        )
    ]


def _tasks(rig: Rig, run_ids: list[str]) -> dict[tuple[str, str], tuple[Any, ...]]:
    """(run, step) -> (run status, task status, attempts, error, number of attempt_errors)."""
    rows = rig.db.rows(
        "select t.run_id::text, t.step_slug, r.status, t.status, t.attempts_count, t.error_message, "
        "       jsonb_array_length(t.attempt_errors), t.permanently_stalled_at is null "
        "  from pgflow.step_tasks as t join pgflow.runs as r on r.run_id = t.run_id "
        " where t.run_id = any(%s::uuid[])",
        [run_ids],
    )
    return {(row[0], row[1]): row[2:] for row in rows}


def _check(rig: Rig, flow: str) -> None:
    """The invariants; the ledgers too where the handlers are atomic (their effects are exact)."""
    rig.db.check(*([flow] if flow == ledger.POISON_FLOW else []))


def test_an_undecodable_input_fails_alone_and_its_batch_neighbours_run(shared_rig: Rig) -> None:
    flow = ledger.POISON_FLOW
    worker = shared_rig.spawn.reused(flow, *WORKER)
    healthy = [json.dumps({"kind": "ok", "i": i}) for i in range(10)]
    inputs = [*healthy[:3], f'{{"n": {HUGE_INTEGER}}}', *healthy[3:7], DEEP_INPUT, *healthy[7:]]
    runs = _start_raw(shared_rig, flow, inputs)
    shared_rig.db.wait_finished([flow], 20)

    found = _tasks(shared_rig, runs)
    poisoned = {
        runs[3]: "integer exceeds 4300 digits",
        runs[8]: "nested deeper than Python's recursion limit",
    }
    for run_id, reason in poisoned.items():
        assert found[(run_id, "effect")] == (
            "failed",
            "failed",
            1,
            f"input not decodable: {reason}",
            1,
            True,
        ), "failed at once, no retry, one line naming the reason"
        assert shared_rig.db.executions([run_id]) == 0, "its handler never ran"
    good = [run_id for run_id in runs if run_id not in poisoned]
    assert set(shared_rig.db.run_statuses(good).values()) == {"completed"}
    assert shared_rig.db.executions(good) == 2 * len(good), "each healthy task ran once"
    assert "worker loop error" not in worker.log()
    alive(worker)
    shared_rig.db.check(flow)


@pytest.mark.parametrize("flow", [ledger.POISON_FLOWS[0], ledger.POISON_FLOWS[1]])
def test_an_output_at_the_depth_limit_feeds_its_dependent_and_one_past_it_fails_at_once(
    shared_rig: Rig, flow: str
) -> None:
    """``atomic=True`` completes on the handler's connection, a plain handler through the completer:
    both enforce the bound before anything is stored."""
    worker = shared_rig.spawn.reused(flow, *WORKER)
    at_limit, past, issue_case = shared_rig.db.start(
        flow,
        [
            {"kind": "deep", "depth": MAX_JSON_DEPTH - 1},  # MAX_JSON_DEPTH containers
            {"kind": "deep", "depth": MAX_JSON_DEPTH},
            {"kind": "deep", "depth": 984},
        ],
    )
    shared_rig.db.wait_finished([flow], 20)

    found = _tasks(shared_rig, [at_limit, past, issue_case])
    assert found[(at_limit, "after")][:3] == ("completed", "completed", 1)
    output = shared_rig.db.val(
        "select output from pgflow.step_states where run_id = %s and step_slug = 'after'", [at_limit]
    )
    assert output == {"depth": MAX_JSON_DEPTH + 1}, "the dependent decoded an input one level deeper"
    for run_id in (past, issue_case):
        assert found[(run_id, "effect")][:5] == (
            "failed",
            "failed",
            1,
            f"output not encodable: nested deeper than {MAX_JSON_DEPTH} levels",
            1,
        ), "failed at once, no retry"
        assert (run_id, "after") not in found
    assert "worker loop error" not in worker.log()
    alive(worker)
    _check(shared_rig, flow)


@pytest.mark.parametrize("flow", [ledger.POISON_FLOWS[0], ledger.POISON_FLOWS[1]])
def test_an_error_with_nul_and_a_lone_surrogate_is_recorded_on_every_attempt(
    shared_rig: Rig, flow: str
) -> None:
    worker = shared_rig.spawn.reused(flow, *WORKER)
    raised, retried = shared_rig.db.start(flow, [{"kind": "nul"}, {"kind": "retry_nul"}])
    shared_rig.db.wait_finished([flow], 20)

    found = _tasks(shared_rig, [raised, retried])
    assert found[(raised, "effect")] == (
        "failed",
        "failed",
        3,
        f"RuntimeError: {ESCAPED_ERROR}",
        3,
        True,
    ), "every attempt recorded, the retry policy ran its course"
    assert found[(retried, "effect")] == ("failed", "failed", 3, ESCAPED_ERROR, 3, True)
    errors = shared_rig.db.val("select attempt_errors from pgflow.step_tasks where run_id = %s", [raised])
    assert [entry["error"] for entry in errors] == [f"RuntimeError: {ESCAPED_ERROR}"] * 3
    run_error = shared_rig.db.val("select error_message from pgflow.runs where run_id = %s", [raised])
    assert ESCAPED_ERROR in run_error
    assert shared_rig.db.executions([raised, retried]) == 6
    assert "could not record the failure" not in worker.log()
    alive(worker)
    _check(shared_rig, flow)


@pytest.mark.parametrize(
    ("flow", "kind", "error", "attempts"),
    [
        (ledger.POISON_FLOWS[1], "exit", "SystemExit: 3", 3),
        (ledger.POISON_FLOWS[1], "interrupt", "KeyboardInterrupt", 3),
        (ledger.POISON_FLOWS[1], "cancel", "CancelledError", 3),
        (ledger.POISON_FLOWS[1], "genexit", "GeneratorExit", 3),
        (ledger.POISON_FLOWS[0], "exit", "SystemExit: 3", 3),
        (ledger.POISON_FLOWS[0], "interrupt", "KeyboardInterrupt", 3),
        (ledger.POISON_FLOWS[2], "cancel", "CancelledError", 2),
        (ledger.POISON_FLOWS[2], "exit", "SystemExit: 3", 2),
    ],
)
def test_a_handler_s_base_exception_fails_the_attempt_under_the_retry_policy(
    shared_rig: Rig, flow: str, kind: str, error: str, attempts: int
) -> None:
    worker = shared_rig.spawn.reused(flow, *WORKER)
    failing, after = shared_rig.db.start(flow, [{"kind": kind}, {"kind": "ok"}])
    shared_rig.db.wait_finished([flow], 20)

    step = "raise_async" if flow == ledger.POISON_FLOWS[2] else "effect"
    found = _tasks(shared_rig, [failing, after])
    assert found[(failing, step)] == ("failed", "failed", attempts, error, attempts, True)
    assert shared_rig.db.run_statuses([after]) == {after: "completed"}, "the worker goes on"
    alive(worker)
    _check(shared_rig, flow)


def test_djangos_types_are_stored_as_strings_in_inputs_and_outputs(shared_rig: Rig) -> None:
    flow = ledger.OUTPUT_FLOWS[0]
    worker = shared_rig.spawn.reused(flow, *WORKER)
    run_id = str(
        start_flow(
            flow,
            {
                "kind": "django",
                "at": datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.UTC),
                "amount": decimal.Decimal("1.50"),
                "id": uuid.UUID(int=1),
            },
        )
    )
    shared_rig.db.wait_finished([flow], 20)
    strings = {"at": "2026-01-02T03:04:05Z", "amount": "1.50", "id": str(uuid.UUID(int=1))}
    assert shared_rig.db.val("select input from pgflow.runs where run_id = %s", [run_id]) == {
        "kind": "django",
        **strings,
    }
    assert shared_rig.db.val("select output from pgflow.runs where run_id = %s", [run_id]) == {
        "emit": strings
    }
    alive(worker)
    shared_rig.db.check()
