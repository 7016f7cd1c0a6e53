"""Hostile messages and outputs against real worker processes (issue 8, item 3), checked with the ledger
harness (tests/ledger.py).

- Bodies that are not pgflow-shaped (SQL NULL, JSON null, arrays, strings, numbers, booleans, objects
  with wrong or missing fields) sent straight into a flow's queue while a worker runs real runs: each is
  archived with a warning naming the queue and its message id; the worker keeps running; every run
  completes with every effect exactly once and the invariants hold.
- A handler output that cannot be stored (not JSON, NaN, nesting past the engine's depth bound), from
  a plain and from an ``atomic=True`` handler: the task fails with a clear error, an atomic handler's
  writes roll back, and the worker keeps running and completes the next run. Strings with NUL
  characters or lone surrogates are stored escaped (issue 15, item 2).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.db import connection

from tests import ledger
from tests.acceptance.faults import LedgerSpawner, Rig
from tests.support.db import scalar
from tests.workers import Spawner, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

FAST = ("--poll-interval", "0.1", "--max-poll-seconds", "0.2", "--heartbeat-seconds", "0.5")

FOREIGN_BODIES: list[str | None] = [
    None,  # SQL NULL
    "null",
    "[]",
    '[1, 2, {"flow_slug": "rel_ledger"}]',
    '"a string"',
    '"x; create table public.pwned(i int)"',
    "42",
    "-1.5",
    "true",
    "{}",
    '{"flow_slug": "rel_ledger"}',
    '{"flow_slug": "rel_ledger", "run_id": "not-a-uuid", "step_slug": "effect", "task_index": 0}',
    '{"flow_slug": "rel_ledger", "run_id": "00000000-0000-0000-0000-000000000000", '
    '"step_slug": "effect", "task_index": -1}',
    '{"flow_slug": "rel_ledger", "run_id": "00000000-0000-0000-0000-000000000000", '
    '"step_slug": "effect", "task_index": "0"}',
    '{"flow_slug": 1, "run_id": 2, "step_slug": 3, "task_index": 4}',
]


@pytest.fixture
def ledger_workers(database_url: str, tmp_path: Path) -> Iterator[Spawner]:
    """A worker of its own for the foreign-bodies test, which stops it; only its flow is reset, so that
    the output flows' shared workers keep theirs."""
    with connection.cursor() as cursor:
        ledger.install_ledger(cursor)
        ledger.reset_flows(cursor, [ledger.LEDGER_FLOW])
    spawner = LedgerSpawner(database_url, tmp_path)
    yield spawner
    spawner.stop_all()
    with connection.cursor() as cursor:
        ledger.reset_flows(cursor, [ledger.LEDGER_FLOW])


def _start(flow: str, flow_input: object) -> str:
    return str(scalar("select run_id from pgflow.start_flow(%s, %s::jsonb)", [flow, json.dumps(flow_input)]))


def _send(queue: str, body: str | None) -> int:
    if body is None:
        return int(scalar("select pgmq.send(%s, null::jsonb)", [queue]))  # type: ignore[arg-type]
    return int(scalar("select pgmq.send(%s, %s::jsonb)", [queue, body]))  # type: ignore[arg-type]


def _all_terminal(flow: str) -> bool:
    return scalar("select count(*) from pgflow.runs where flow_slug = %s and status = 'started'", [flow]) == 0


def test_foreign_bodies_are_archived_with_a_warning_while_real_runs_complete_exactly_once(
    ledger_workers: Spawner,
) -> None:
    flow = ledger.LEDGER_FLOW
    worker = ledger_workers(flow, "--concurrency", "4", *FAST)
    runs = [_start(flow, list(range(10))) for _ in range(3)]
    foreign = [_send(flow, body) for body in FOREIGN_BODIES]
    runs += [_start(flow, list(range(10))) for _ in range(3)]

    wait_until(lambda: _all_terminal(flow), 60, "every run to finish", interval=0.2)
    wait_until(
        lambda: (
            scalar(f"select count(*) from pgmq.a_{flow} where msg_id = any(%s)", [foreign]) == len(foreign)
        ),
        20,
        "every foreign message to be archived",
    )
    statuses = scalar(
        "select array_agg(distinct status) from pgflow.runs where run_id = any(%s::uuid[])", [runs]
    )
    assert statuses == ["completed"]
    assert scalar(f"select count(*) from pgmq.q_{flow} where msg_id = any(%s)", [foreign]) == 0

    log = worker.log()
    warned: set[int] = set()
    for line in log.splitlines():
        if "foreign message" in line:
            assert "WARNING" in line and f"queue={flow}" in line, line
            match = re.search(r"msg_ids=([\d,]+)", line)
            assert match, line
            warned |= {int(i) for i in match.group(1).split(",")}
    assert warned == set(foreign), f"one warning per foreign message id:\n{log}"
    assert worker.process.poll() is None, "the worker keeps running"
    assert "Traceback" not in log
    assert scalar("select count(*) from pgflow.worker_pauses where flow_slug = %s", [flow]) == 0

    with connection.cursor() as cursor:
        ledger.assert_invariants(cursor)
        ledger.assert_exactly_once(cursor, flow)
        cursor.execute("select count(*) from public.ledger_effect where flow_slug = %s", [flow])
        assert cursor.fetchone()[0] == len(runs) * 10
        cursor.execute("select to_regclass('public.pwned') is null")
        assert cursor.fetchone()[0] is True
    worker.terminate()
    assert worker.wait(15) == 0


BAD_OUTPUTS = ["object", "set", "bytes", "nan", "inf", "deep"]
CLEAR = ("not JSON-serialisable", "could not record", "nested deeper than")
"""What the first line of a failed task's error says about an output that could not be stored."""
OUTPUT_WORKER = ("--concurrency", "2", *FAST)
"""The options of each output flow's worker, which the tests below share (``shared_rig``); that it
still stops cleanly after them is checked when the module ends."""


@pytest.mark.parametrize("flow", ledger.OUTPUT_FLOWS)
def test_unstorable_outputs_fail_their_task_and_the_worker_goes_on(shared_rig: Rig, flow: str) -> None:
    worker = shared_rig.spawn.reused(flow, *OUTPUT_WORKER)
    bad = {kind: _start(flow, {"kind": kind}) for kind in BAD_OUTPUTS}
    wait_until(lambda: _all_terminal(flow), 60, "every bad run to finish", interval=0.2)
    good = _start(flow, {"kind": "ok"})
    wait_until(lambda: _all_terminal(flow), 30, "the good run to finish", interval=0.2)

    with connection.cursor() as cursor:
        cursor.execute(
            "select r.run_id::text, r.status, t.status, t.attempts_count, t.error_message "
            "from pgflow.runs as r join pgflow.step_tasks as t on t.run_id = r.run_id where r.flow_slug = %s",
            [flow],
        )
        found = {row[0]: row[1:] for row in cursor.fetchall()}
    problems = []
    for kind, run_id in bad.items():
        run_status, task_status, attempts, error = found[run_id]
        if (run_status, task_status, attempts) != ("failed", "failed", 1) or not error:
            problems.append(
                f"{kind}: run {run_status}, task {task_status}, attempts {attempts}, error {error!r}"
            )
        elif not any(clear in error.splitlines()[0] for clear in CLEAR):
            problems.append(f"{kind}: unclear error {error!r}")
    assert not problems, "\n".join(problems) + "\n" + worker.log()[-3000:]
    assert found[good][:3] == ("completed", "completed", 1)
    assert worker.process.poll() is None, "the worker keeps running"

    with connection.cursor() as cursor:
        ledger.assert_invariants(cursor)
        cursor.execute("select run_id::text from public.ledger_effect where flow_slug = %s", [flow])
        effects = {row[0] for row in cursor.fetchall()}
    if flow == "rel_outputs_atomic":
        assert effects == {good}, "an atomic handler's writes roll back when its output cannot be stored"


def test_atomic_unstorable_output_error_is_one_line_like_the_plain_path(shared_rig: Rig) -> None:
    flow = ledger.OUTPUT_FLOWS[1]
    worker = shared_rig.spawn.reused(flow, *OUTPUT_WORKER)
    runs = {kind: _start(flow, {"kind": kind}) for kind in ("set", "deep")}
    wait_until(lambda: _all_terminal(flow), 30, "the runs to finish", interval=0.2)
    for kind, run_id in runs.items():
        error = str(scalar("select error_message from pgflow.step_tasks where run_id = %s", [run_id]))
        assert error.startswith("output not encodable: "), (kind, error)
        assert "\n" not in error, (kind, error)
    assert "handler failed" not in worker.log(), "the handler did nothing wrong: its output was refused"


@pytest.mark.parametrize("flow", ledger.OUTPUT_FLOWS)
def test_nul_and_lone_surrogates_in_outputs_are_stored_escaped(shared_rig: Rig, flow: str) -> None:
    worker = shared_rig.spawn.reused(flow, *OUTPUT_WORKER)
    runs = {kind: _start(flow, {"kind": kind}) for kind in ("nul", "surrogate")}
    wait_until(lambda: _all_terminal(flow), 30, "the runs to finish", interval=0.2)
    outputs = {
        kind: scalar("select output::text from pgflow.step_states where run_id = %s", [run_id])
        for kind, run_id in runs.items()
    }
    assert {kind: json.loads(str(text)) for kind, text in outputs.items()} == {
        "nul": {"text": "a\\u0000b"},
        "surrogate": "\\ud800",
    }
    statuses = {
        scalar("select status from pgflow.runs where run_id = %s", [run_id]) for run_id in runs.values()
    }
    assert statuses == {"completed"}
    assert "could not record" not in worker.log()
    with connection.cursor() as cursor:
        ledger.assert_invariants(cursor)
