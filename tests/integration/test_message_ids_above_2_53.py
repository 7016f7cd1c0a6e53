"""PGMQ message ids above 2^53 cross every boundary exactly (issue 4, item 11): a float would round
9007199254740993 to 9007199254740992. The queue's sequence is moved past 2^53, a run goes through a real
worker, and its ids must appear as exact decimals in the worker log and as decimal strings in
``manage.py pgflow_runs RUN_ID --format json --tasks``."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from pgflow_django import start_flow, wait_for_run
from tests.integration.commands_support import manage_in_process
from tests.sql.support import jb, q, val
from tests.workers import WorkerProcess, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

FLOW = "example_chain"
FIRST = 2**53 + 1  # 9007199254740993: the first integer a double cannot hold
FOREIGN = 2**53 + 5
USED = (FIRST, FIRST + 1, FIRST + 2, FOREIGN)
ROUNDED = {str(int(float(n))) for n in USED} - {str(n) for n in USED}
"""What a float would make of these ids: 9007199254740992 and 9007199254740996."""


def _restart_ids_at(msg_id: int) -> None:
    q(
        "select setval(pg_get_serial_sequence('pgmq.q_example_chain', 'msg_id'), %s, false)",
        [msg_id],
    )


def test_ids_above_2_53_are_exact_in_logs_and_json(
    spawn_worker: Callable[..., WorkerProcess], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert int(float(FIRST)) != FIRST, "the id is one a float cannot represent"
    assert sorted(ROUNDED) == [str(2**53), str(2**53 + 4)]
    monkeypatch.setenv("PGFLOW_TEST_WORKER_LOG_LEVEL", "DEBUG")
    worker = spawn_worker(FLOW, "--poll-interval", "0.1", "--max-poll-seconds", "0.2")
    _restart_ids_at(FIRST)

    run_id = start_flow(FLOW, {"n": 1})
    run = wait_for_run(run_id, timeout=30)
    assert run.status == "completed"
    ids = {
        r["step_slug"]: r["message_id"]
        for r in q("select step_slug, message_id from pgflow.step_tasks where run_id = %s", [run_id])
    }
    assert ids == {"first": FIRST, "second": FIRST + 1, "third": FIRST + 2}

    # a foreign message above 2^53: its warning names the exact id
    _restart_ids_at(FOREIGN)
    foreign = int(val("select pgmq.send(%s, %s::jsonb)", [FLOW, jb({"not": "pgflow"})]))
    assert foreign == FOREIGN
    wait_until(lambda: f"msg_ids={FOREIGN}" in worker.log(), 15, "the foreign-message warning")

    log = worker.log()
    for msg_id in ids.values():
        assert f"msg_id={msg_id} " in log, f"{msg_id} not in the worker log:\n{log}"
    for rounded in ROUNDED:
        assert rounded not in log, f"a rounded id {rounded} appears in the worker log"

    result = manage_in_process("pgflow_runs", str(run_id), "--format", "json", "--tasks", settings={})
    assert result.returncode == 0, result.stderr
    for rounded in ROUNDED:
        assert rounded not in result.stdout
    shown = json.loads(result.stdout)
    assert {t["step_slug"]: t["message_id"] for t in shown["tasks"]} == {
        slug: str(msg_id) for slug, msg_id in ids.items()
    }
    for msg_id in ids.values():
        assert f'"{msg_id}"' in result.stdout, "ids are decimal strings in the JSON"
