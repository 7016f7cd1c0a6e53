"""The poison cases as fault scenarios (issue 15, item 10), closed by the ledger checks.

Each round starts, in one statement, healthy runs, runs whose input no Python worker can decode (an
integer of 5,000 digits, nesting 5,000 deep) and runs whose handler raises an error holding NUL and a
lone surrogate on every attempt (max_attempts 3, no delay), beside runs whose handler sleeps on its
first attempt. Once everything but the sleepers has finished, the workers holding the sleepers are
killed (kill -9) and fresh workers recover them (claims back-dated past timeout + 30 s). Then: every
healthy run completed with exactly one effect, every poisoned run failed at once without its handler
running, every NUL run failed after its three recorded attempts, no task was permanently stalled, and
the engine's invariants hold.

Counts: WORKERS workers, ROUNDS rounds of TASKS_PER_ROUND runs (CI 2 x 2 x 16; ``make chaos`` 4 x 4 x 16).
"""

from __future__ import annotations

import json

import pytest

from tests import ledger
from tests.acceptance.faults import FAST, RECOVERY_AGE, Rig, alive, scale
from tests.workers import WorkerProcess, wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

WORKERS, ROUNDS = scale(2, 4), scale(2, 4)
SLEEPERS, HEALTHY, NUL = 2, 8, 4
POISON = {
    '{"n": ' + "9" * 5000 + "}": "input not decodable: integer exceeds 4300 digits",
    "[" * 5000 + "]" * 5000: "input not decodable: nested deeper than Python's recursion limit",
}
TASKS_PER_ROUND = SLEEPERS + HEALTHY + NUL + len(POISON)
ESCAPED_ERROR = "RuntimeError: bad \\u0000 byte and lone \\ud800 surrogate"


def _round_inputs() -> list[tuple[str, str]]:
    """(kind, JSON text) of one round, poison interleaved with healthy and failing runs."""
    ok = [("ok", json.dumps({"kind": "ok", "i": i})) for i in range(HEALTHY)]
    nul = [("nul", json.dumps({"kind": "nul"}))] * NUL
    sleep = [("sleep", json.dumps({"kind": "sleep", "sleep": 120}))] * SLEEPERS
    poison = [("poison", text) for text in POISON]
    mixed = [*sleep, *ok[:3], poison[0], *nul[:2], *ok[3:6], poison[1], *nul[2:], *ok[6:]]
    assert len(mixed) == TASKS_PER_ROUND
    return mixed


def test_poisoned_runs_beside_healthy_ones_under_kill_9(rig: Rig) -> None:
    flow, db = ledger.POISON_FLOW, rig.db
    args = ("--concurrency", "24", "--batch-size", "24", *FAST)
    workers: list[WorkerProcess] = rig.spawn.many(WORKERS, flow, *args)
    runs: dict[str, str] = {}
    poisoned: dict[str, str] = {}
    kills = 0
    for _ in range(ROUNDS):
        inputs = _round_inputs()
        ids = [
            str(row[0])
            for row in db.rows(
                "select run_id from pgflow.start_flows(%s, %s::jsonb)",
                [flow, "[" + ",".join(text for _, text in inputs) + "]"],
            )
        ]
        for run_id, (kind, text) in zip(ids, inputs, strict=True):
            runs[run_id] = kind
            if kind == "poison":
                poisoned[run_id] = POISON[text]
        sleepers = [run_id for run_id in ids if runs[run_id] == "sleep"]
        wait_until(lambda s=sleepers: db.executions(s) == len(s), 20, "every sleeper to be mid-sleep")
        others = [run_id for run_id in ids if runs[run_id] != "sleep"]
        wait_until(
            lambda o=others: set(db.run_statuses(o).values()) <= {"completed", "failed"},
            30,
            "every run but the sleepers to finish",
            0.2,
        )
        holders = {
            str(row[0])
            for row in db.rows(
                "select last_worker_id from pgflow.step_tasks where run_id = any(%s::uuid[])", [sleepers]
            )
        }
        for worker in [w for w in workers if w.worker_id in holders]:
            worker.kill()
            kills += 1
            workers.remove(worker)
        workers += rig.spawn.many(WORKERS - len(workers), flow, *args)
        db.backdate(sleepers, RECOVERY_AGE)
        db.wait_finished([flow], 30)

    statuses = db.run_statuses(list(runs))
    by_kind: dict[str, set[str]] = {}
    for run_id, kind in runs.items():
        by_kind.setdefault(kind, set()).add(statuses[run_id])
    assert by_kind == {
        "ok": {"completed"},
        "sleep": {"completed"},
        "poison": {"failed"},
        "nul": {"failed"},
    }, "no healthy run harmed by a poisoned neighbour"
    for run_id, reason in poisoned.items():
        row = db.rows(
            "select attempts_count, error_message from pgflow.step_tasks where run_id = %s", [run_id]
        )
        assert row == [(1, reason)], "failed at once, no retry, the reason in one line"
    nul_runs = [run_id for run_id, kind in runs.items() if kind == "nul"]
    recorded = db.rows(
        "select attempts_count, error_message from pgflow.step_tasks where run_id = any(%s::uuid[])",
        [nul_runs],
    )
    assert recorded == [(3, ESCAPED_ERROR)] * len(nul_runs), "every attempt's error recorded"
    assert db.executions(list(poisoned)) == 0, "a poisoned input never reaches a handler"
    assert db.executions(nul_runs) == 3 * len(nul_runs)
    healthy = [run_id for run_id, kind in runs.items() if kind in ("ok", "sleep")]
    effects = db.effects(healthy)
    assert len(effects) == 2 * len(healthy), "one effect per task (effect, after) of each healthy run"
    assert db.effects(nul_runs + list(poisoned)) == [], "a failed attempt's effect rolled back"
    alive(*workers)
    db.check(flow)
    with db.conn.cursor() as cursor:
        ledger.assert_failures_recorded(cursor, flow)
    tasks = db.val("select count(*) from pgflow.step_tasks where run_id = any(%s::uuid[])", [list(runs)])
    print(
        f"\npoison fault suite: {WORKERS + kills} workers ({WORKERS} at a time, {kills} killed with -9), "
        f"{len(runs)} runs, {tasks} tasks ({len(poisoned)} undecodable inputs, {len(nul_runs)} NUL errors "
        f"x 3 attempts, {ROUNDS * SLEEPERS} recovered after kill -9), {len(effects)} effects counted "
        f"(0 duplicates, 0 lost), {db.executions(list(runs))} handler executions"
    )
