"""Workers and a changed flow under ``ON_SHAPE_CHANGE = "refuse"`` or a replacement, with real
``pgflow_worker`` processes: a worker started on a changed definition refuses with one line and deletes
nothing (whatever ``DEBUG`` says); one whose flow is replaced under it claims nothing of the new shape
and exits with one line naming the fix. (The default adds a version instead:
tests/acceptance/test_rolling_deploy.py.)"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection

from pgflow_django import Flow, compile_flow, start_flow
from tests.sql.support import q, val
from tests.workers import WorkerProcess, run_manage, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

FAST = ("--poll-interval", "0.1", "--max-poll-seconds", "0.2", "--heartbeat-seconds", "0.5")
REPLACED_LINE = (
    "flow example_chain was replaced or deleted in the database after this worker compiled it: claimed "
    "nothing and stopping; restart the worker with the code that defines the current flow"
)


def new_chain() -> Flow:
    """``example_chain`` as a newer deploy defines it: one step more."""
    flow = Flow("example_chain", timeout=10)

    @flow.step()
    def first(flow_input: Any) -> Any:
        return flow_input

    @flow.step(depends_on=[first])
    def second(deps: Any) -> Any:
        return deps

    @flow.step(depends_on=[second])
    def third(deps: Any) -> Any:
        return deps

    @flow.step(depends_on=[third])
    def extra(deps: Any) -> Any:
        return deps

    return flow


def compile_new_chain_with_a_run() -> None:
    """The newer deploy's flow in place of the project's, with a run of it."""
    flow = new_chain()
    compile_flow(flow, on_change="replace", confirmed_runs=0)
    start_flow(flow, {"n": 1})


def chain_runs() -> int:
    return int(val("select count(*) from pgflow.runs where flow_slug = 'example_chain'"))


@pytest.mark.parametrize("debug", ["1", "0"])
def test_a_worker_started_on_a_changed_flow_refuses_and_deletes_nothing(
    database_url: str, clean_example_flows: None, debug: str
) -> None:
    """With DEBUG on, the old default recompiled here and deleted the run."""
    compile_new_chain_with_a_run()
    result = run_manage(
        database_url,
        "pgflow_worker",
        "--flow",
        "example_chain",
        env={"DJANGO_DEBUG": debug, "PGFLOW_ON_SHAPE_CHANGE": "refuse"},
    )
    assert result.returncode != 0
    lines = [line for line in result.stderr.splitlines() if "differs from its compiled definition" in line]
    assert len(lines) == 1, result.stderr
    assert "(shape differs: - step extra)" in lines[0]
    assert "add it as a new version" in lines[0]
    assert "manage.py pgflow_compile example_chain --replace (deletes 1 run (1 unfinished))" in lines[0]
    assert "Traceback" not in result.stderr
    assert chain_runs() == 1
    assert val("select count(*) from pgflow.steps where flow_slug = 'example_chain'") == 4


def test_replace_if_idle_lets_a_worker_replace_an_idle_flow_with_a_warning(
    spawn_worker: Callable[..., WorkerProcess], monkeypatch: pytest.MonkeyPatch
) -> None:
    compile_new_chain_with_a_run()
    q("update pgflow.runs set status = 'completed', remaining_steps = 0 where flow_slug = 'example_chain'")
    monkeypatch.setenv("PGFLOW_ON_SHAPE_CHANGE", "replace-if-idle")
    worker = spawn_worker("example_chain", *FAST)
    assert (
        "WARNING pgflow_django.flows.compiler: replaced flow example_chain (on_change=replace-if-idle): "
        "deleted 1 run(s) (0 unfinished) and compiled it again: - step extra" in worker.log()
    )
    assert chain_runs() == 0
    assert val("select count(*) from pgflow.steps where flow_slug = 'example_chain'") == 3


def test_replace_if_idle_never_replaces_a_flow_with_an_unfinished_run(
    database_url: str, clean_example_flows: None
) -> None:
    compile_new_chain_with_a_run()
    result = run_manage(
        database_url,
        "pgflow_worker",
        "--flow",
        "example_chain",
        env={"PGFLOW_ON_SHAPE_CHANGE": "replace-if-idle"},
    )
    assert result.returncode != 0
    assert "'replace-if-idle' left it alone: 1 of its runs are unfinished" in result.stderr
    assert chain_runs() == 1


def test_a_worker_whose_flow_is_replaced_claims_nothing_of_the_new_shape_and_exits(
    spawn_worker: Callable[..., WorkerProcess],
) -> None:
    old = spawn_worker("example_chain", *FAST)
    first_run = start_flow("example_chain", {"n": 1})
    wait_until(
        lambda: val("select status from pgflow.runs where run_id = %s", [first_run]) == "completed",
        20,
        "the old-shape worker to finish a run of its own shape",
    )

    newer = new_chain()
    result = compile_flow(newer, on_change="replace")
    assert (result.status, result.runs) == ("recompiled", 1)
    new_runs = [start_flow(newer, {"n": n}) for n in range(3)]

    code = old.wait(20)
    log = old.log()
    assert code == 1, log
    assert log.count(REPLACED_LINE) == 1, log
    assert "Traceback" not in log and "is not defined in this worker" not in log, log
    with connection.cursor() as cursor:
        cursor.execute(
            "select t.status, t.attempts_count, m.read_ct from pgflow.step_tasks as t"
            " join pgmq.q_example_chain as m on m.msg_id = t.message_id where t.run_id = any(%s)",
            [new_runs],
        )
        tasks = cursor.fetchall()
    assert tasks == [("queued", 0, 0)] * 3, "the old-shape worker must not read or claim new-shape tasks"
    assert {val("select status from pgflow.runs where run_id = %s", [run]) for run in new_runs} == {"started"}
