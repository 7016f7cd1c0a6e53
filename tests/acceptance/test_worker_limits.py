"""``--max-tasks``, ``--until-empty``, ``--queue '*'`` and ``--exclude-queue`` on real worker
processes: each exits 0 when its limit is reached, in-flight work completes, and across concurrent
workers no task is lost or run twice (``example_ledger`` writes one ledger row per call, committed
with the completion)."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator

import pytest

from pgflow_django import start_flow, start_flows
from pgflow_django.flows.compiler import compile_flow
from pgflow_django.flows.registry import get_flow
from testproject.example.support import open_thread, support_routed, support_routed_v2
from testproject.example.tasks import add, send_welcome
from tests.sql.support import q, val
from tests.tasks_support import SETTINGS_MODULE, clean_task_flows, status
from tests.workers import spawn_worker_process

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

FAST = ("--poll-interval", "0.2", "--heartbeat-seconds", "0.5")


def worker(database_url: str, *args: str, settings: str = "testproject.settings") -> subprocess.Popen[str]:
    return spawn_worker_process(database_url, *FAST, *args, settings=settings)


def finish(process: subprocess.Popen[str], timeout: float = 90) -> tuple[int, str]:
    _, err = process.communicate(timeout=timeout)
    return process.returncode, err


def worker_id(err: str) -> str:
    match = re.search(r"worker ([0-9a-f-]{36}) started", err)
    assert match, err
    return match.group(1)


def ledger_calls(run_id: object) -> list[dict[str, object]]:
    return q(
        "select key, count(*)::int as calls, max(attempt) as attempt from example_ledgerentry "
        "where key like %s group by key order by key",
        [f"{run_id}:%"],
    )


def completed_by(worker: str) -> int:
    return int(
        val(
            "select count(*) from pgflow.step_tasks where status = 'completed' and last_worker_id = %s::uuid",
            [worker],
        )
    )


def test_max_tasks_exits_after_exactly_n_and_concurrent_workers_lose_and_repeat_nothing(
    database_url: str, clean_example_flows: None
) -> None:
    compile_flow(get_flow("example_ledger"))
    run_id = start_flow("example_ledger", [{"i": index} for index in range(30)])

    code, err = finish(
        worker(database_url, "--flow", "example_ledger", "--max-tasks", "7", "--concurrency", "3")
    )
    assert code == 0, err
    assert "claimed 7 task(s) of --max-tasks 7: stopping queue=example_ledger" in err
    assert completed_by(worker_id(err)) == 7
    assert (
        val("select count(*) from pgflow.step_tasks where run_id = %s and status = 'started'", [run_id]) == 0
    )

    pair = [
        worker(database_url, "--flow", "example_ledger", "--max-tasks", "8", "--concurrency", "4")
        for _ in range(2)
    ]
    results = [finish(process) for process in pair]
    for code, err in results:
        assert code == 0, err
        assert completed_by(worker_id(err)) == 8

    code, err = finish(worker(database_url, "--flow", "example_ledger", "--until-empty"))
    assert code == 0, err
    assert completed_by(worker_id(err)) == 7
    assert val("select status from pgflow.runs where run_id = %s", [run_id]) == "completed"
    calls = ledger_calls(run_id)
    assert len(calls) == 30
    assert {(row["calls"], row["attempt"]) for row in calls} == {(1, 1)}, "a task ran twice"


def test_until_empty_waits_for_the_steps_its_own_completions_start(
    database_url: str, clean_example_flows: None
) -> None:
    """example_chain has three steps: each completion starts the next, so the queue is empty between
    them while a task is in flight or its result is not recorded yet."""
    compile_flow(get_flow("example_chain"))
    runs = start_flows("example_chain", [{"n": index} for index in range(5)])
    code, err = finish(worker(database_url, "--flow", "example_chain", "--until-empty", "--concurrency", "2"))
    assert code == 0, err
    assert "nothing runnable on queue(s) example_chain: stopping (--until-empty)" in err
    assert q("select status from pgflow.runs where run_id = any(%s)", [runs]) == [{"status": "completed"}] * 5


@pytest.fixture
def routed_cleaned(database_url: str) -> Iterator[str]:
    from tests.integration.test_worker_shared_queues import _clean

    _clean()
    yield database_url
    _clean()


def test_queue_star_with_routed_flows_follows_runs_across_their_queues(routed_cleaned: str) -> None:
    """Each support run hops support_fast -> support_bulk -> support_fast: a loop whose queue is
    empty for a moment must not end the process while the other queue's completions feed it."""
    for flow in (support_routed, support_routed_v2):
        compile_flow(flow)
    runs = [
        open_thread("refund", ["please refund"], flow=support_routed, work_ms=200)[1],
        open_thread("crash", ["an error", "a crash"], flow=support_routed_v2, work_ms=200)[1],
    ]
    code, err = finish(
        worker(
            routed_cleaned,
            "--queue",
            "*",
            "--flow",
            "support_routed",
            "--flow",
            "support_routed_v2",
            "--until-empty",
        )
    )
    assert code == 0, err
    assert " started queue=* " in err, err
    assert "serving queue=support_bulk " in err and "serving queue=support_fast " in err
    assert "nothing runnable on queue(s) support_bulk,support_fast: stopping (--until-empty)" in err
    assert q("select status from pgflow.runs where run_id = any(%s)", [runs]) == [{"status": "completed"}] * 2


@pytest.fixture
def task_flows_cleaned(database_url: str) -> Iterator[str]:
    clean_task_flows()
    yield database_url
    clean_task_flows()


def test_queue_star_serves_every_queue_and_exclude_queue_leaves_one_out(task_flows_cleaned: str) -> None:
    sums = [add.enqueue(index, 1) for index in range(3)]
    mails = [send_welcome.enqueue(f"u{index}@example.com") for index in range(2)]
    code, err = finish(
        worker(task_flows_cleaned, "--tasks", "--queue", "*", "--until-empty", settings=SETTINGS_MODULE)
    )
    assert code == 0, err
    assert "serving queue=default " in err and "serving queue=mail " in err
    assert [add.get_result(r.id).return_value for r in sums] == [1, 2, 3]
    assert all(send_welcome.get_result(r.id).status == status.SUCCESSFUL for r in mails)

    left = send_welcome.enqueue("later@example.com")
    done = add.enqueue(20, 22)
    code, err = finish(
        worker(
            task_flows_cleaned,
            "--tasks",
            "--queue",
            "*",
            "--exclude-queue",
            "mail",
            "--until-empty",
            settings=SETTINGS_MODULE,
        )
    )
    assert code == 0, err
    assert " started queue=default " in err and "queue=mail " not in err
    assert add.get_result(done.id).return_value == 42
    assert send_welcome.get_result(left.id).status == status.READY


def test_max_tasks_is_one_budget_across_the_queues(task_flows_cleaned: str) -> None:
    results = [add.enqueue(index, 0) for index in range(4)] + [
        send_welcome.enqueue(f"m{index}@example.com") for index in range(4)
    ]
    code, err = finish(
        worker(task_flows_cleaned, "--tasks", "--queue", "*", "--max-tasks", "5", settings=SETTINGS_MODULE)
    )
    assert code == 0, err
    statuses = [result.task.get_result(result.id).status for result in results]
    assert statuses.count(status.SUCCESSFUL) == 5
    assert statuses.count(status.READY) == 3


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--flow", "example_chain", "--exclude-queue", "x"], "--exclude-queue x: not a served queue"),
        (["--flow", "example_chain", "--queue", "*"], "flow 'example_chain' is not routed"),
        (["--tasks", "--queue", "*", "--exclude-queue", "nope"], "--exclude-queue nope: not a queue of"),
    ],
)
def test_option_mistakes_are_one_line(task_flows_cleaned: str, args: list[str], message: str) -> None:
    code, err = finish(worker(task_flows_cleaned, *args, settings=SETTINGS_MODULE))
    assert code == 1
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("CommandError: ") and message in lines[0], err
