"""``pgflow_runs --watch``: snapshots of active runs (step progress) and queue depths; Ctrl-C ends it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid

import pytest
from django.core.management.base import CommandError

from pgflow_django import start_flow
from pgflow_django.flows.compiler import compile_flow
from pgflow_django.management.commands import pgflow_runs
from tests import workers
from tests.integration import commands_flows
from tests.integration.commands_support import SETTINGS_ENV, call
from tests.sql import support


@pytest.fixture
def runs() -> dict[str, uuid.UUID]:
    """A completed greet run, a greet run waiting on its first step, a failed boom run."""
    compile_flow(commands_flows.greet)
    compile_flow(commands_flows.boom)
    done = start_flow("cmd_greet", {"name": "ada"})
    support.run_step("cmd_greet", "hello", {"greeting": "hello ada"})
    support.run_step("cmd_greet", "shout", "HELLO ADA")
    going = start_flow("cmd_greet", {"name": "bob"})
    failed = start_flow("cmd_boom", {})
    assert support.fail(support.claim_one("cmd_boom"), "boom on purpose") == "failed"
    return {"completed": done, "started": going, "failed": failed}


def test_snapshots_show_active_runs_step_progress_and_queue_depths(runs: dict[str, uuid.UUID]) -> None:
    out, err = call(
        "pgflow_runs", "--watch", "--flow", "cmd_greet", "--iterations", "2", "--interval", "0.05"
    )
    assert err == ""
    assert out.count("active run(s) of cmd_greet") == 2
    assert str(runs["started"]) in out
    assert str(runs["completed"]) not in out and str(runs["failed"]) not in out
    assert "hello 0/1" in out and "shout -" not in out
    assert "shout 0/1" in out
    queue_rows = [cells for cells in map(str.split, out.splitlines()) if cells and cells[0] == "cmd_greet"]
    # the started run's one queued message (its first step); whether PGMQ counts it visible yet depends
    # on now() inside the test's transaction, so only the split is checked
    assert [cells[:2] for cells in queue_rows] == [["cmd_greet", "1"]] * 2, out
    assert all(int(cells[2]) + int(cells[3]) == 1 for cells in queue_rows), out


def test_step_progress_counts_completed_tasks(runs: dict[str, uuid.UUID]) -> None:
    support.run_step("cmd_greet", "hello", {"greeting": "hello bob"})
    out, _ = call("pgflow_runs", "--watch", "--flow", "cmd_greet", "--iterations", "1")
    assert "hello 1/1" in out and "shout 0/1" in out


def test_no_active_runs() -> None:
    compile_flow(commands_flows.boom)
    out, _ = call("pgflow_runs", "--watch", "--flow", "cmd_boom", "--iterations", "1")
    assert "0 active run(s) of cmd_boom" in out
    assert "no active runs" in out and "no flow queues" not in out


def test_watching_a_flow_that_does_not_exist_is_refused() -> None:
    with pytest.raises(CommandError, match=r"--flow: no flow 'cmd_nothing' \(known flows: ") as caught:
        call("pgflow_runs", "--watch", "--flow", "cmd_nothing", "--iterations", "1")
    assert caught.value.returncode == 2


def test_ctrl_c_ends_the_watch_with_success(
    runs: dict[str, uuid.UUID], monkeypatch: pytest.MonkeyPatch
) -> None:
    def interrupt(seconds: float) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(pgflow_runs.time, "sleep", interrupt)
    out, _ = call("pgflow_runs", "--watch")
    assert out.count("active run(s)") == 1
    assert str(runs["started"]) in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--interval", "1"], "--interval and --iterations only apply with --watch"),
        (["--iterations", "1"], "--interval and --iterations only apply with --watch"),
        (["--watch", str(uuid.UUID(int=0))], "--watch shows every active run; leave out RUN_ID"),
        (["--watch", "--status", "failed"], "--watch cannot be combined with --status"),
        (["--watch", "--format", "json"], "--watch cannot be combined with --format json"),
    ],
)
def test_bad_combinations(args: list[str], message: str) -> None:
    with pytest.raises(CommandError, match=message):
        call("pgflow_runs", *args)


def test_sigint_in_a_subprocess_exits_0(database_url: str) -> None:
    process = subprocess.Popen(
        [
            sys.executable,
            str(workers.MANAGE),
            "pgflow_runs",
            "--watch",
            "--interval",
            "0.2",
        ],
        cwd=workers.REPO,
        env={**os.environ, "DATABASE_URL": database_url, "PYTHONUNBUFFERED": "1", **SETTINGS_ENV},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # as a terminal starts it: a suite started in the background by a shell without job control
        # inherits SIGINT ignored, and Python then installs no KeyboardInterrupt handler
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        assert process.stdout is not None
        first = process.stdout.readline()
        assert "active run(s)" in first, first + (process.stderr.read() if process.stderr else "")
        time.sleep(0.3)
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, err
    assert "Traceback" not in err
