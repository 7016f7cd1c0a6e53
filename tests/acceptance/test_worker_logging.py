"""The worker speaks on stderr without a LOGGING setting (as ``startproject`` makes a project): its
start-up line, retries as one line, drain and stop; ``--log-level`` and ``-v`` are respected, and a
project that routes the ``pgflow_django`` logger itself gets every line once. Real worker processes
with tests/first_hour_settings.py, their stderr read on its own."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from pgflow_django import start_flow, wait_for_run
from tests.first_hour import SETTINGS
from tests.sql.support import q
from tests.workers import MANAGE, REPO, wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

FAST = ("--poll-interval", "0.2", "--heartbeat-seconds", "0.5", "--concurrency", "2")


class QuietProjectWorker:
    """``pgflow_worker`` with stdout and stderr in files of their own."""

    def __init__(self, database_url: str, log_dir: Path, args: list[str], env: dict[str, str]) -> None:
        index = len(list(log_dir.glob("stderr-*")))
        self.stderr_path = log_dir / f"stderr-{index}.txt"
        self.stdout_path = log_dir / f"stdout-{index}.txt"
        with self.stderr_path.open("wb") as err, self.stdout_path.open("wb") as out:
            self.process = subprocess.Popen(
                [sys.executable, str(MANAGE), "pgflow_worker", *args],
                cwd=REPO,
                env={
                    **os.environ,
                    "DATABASE_URL": database_url,
                    "DJANGO_SETTINGS_MODULE": SETTINGS,
                    "PYTHONUNBUFFERED": "1",
                    "PYTHONWARNINGS": "ignore",
                    **env,
                },
                stdout=out,
                stderr=err,
            )

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def wait_for(self, text: str, timeout: float = 30) -> None:
        def seen() -> bool:
            if text in self.stderr():
                return True
            if self.process.poll() is not None:
                raise AssertionError(f"worker exited with {self.process.returncode}:\n{self.stderr()}")
            return False

        wait_until(seen, timeout, f"{text!r} on the worker's stderr")

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        return self.process.wait(30)


@pytest.fixture
def quiet_worker(
    database_url: str, clean_example_flows: None, tmp_path: Path
) -> Iterator[type[QuietProjectWorker]]:
    started: list[QuietProjectWorker] = []

    class Spawn(QuietProjectWorker):
        def __init__(self, *args: str, env: dict[str, str] | None = None) -> None:
            super().__init__(database_url, tmp_path, list(args), env or {})
            started.append(self)

    yield Spawn  # type: ignore[misc]
    for worker in started:
        if worker.process.poll() is None:
            worker.process.kill()
            worker.process.wait(10)


def test_without_logging_the_worker_prints_its_life_on_stderr(quiet_worker: type[QuietProjectWorker]) -> None:
    worker = quiet_worker("--flow", "example_flaky", *FAST)
    worker.wait_for(" started queue=")
    run_id = start_flow("example_flaky", {"n": 1})
    assert wait_for_run(run_id, timeout=30).status == "completed"
    worker.wait_for("handler asked for a retry")
    assert worker.stop() == 0
    err = worker.stderr()
    start = re.search(r"INFO pgflow_django.worker: worker \S+ started (.*)", err)
    assert start, err
    assert "queue=example_flaky flow=example_flaky concurrency=2 batch=" in start.group(1)
    assert re.search(r"database=default \(test_\w+@", start.group(1)), start.group(1)
    failures = [line for line in err.splitlines() if "handler failed" in line]
    assert len(failures) == 1 and "RuntimeError: the first call fails on purpose" in failures[0]
    assert "Traceback" not in err, "an expected failed attempt is one line, its traceback only at debug"
    assert "SIGTERM: stopped polling; finishing 0 in-flight task(s)" in err
    assert re.search(r"INFO pgflow_django.worker: worker \S+ stopped queue=example_flaky", err)
    assert worker.stdout_path.read_text() == ""


def test_debug_level_adds_the_traceback(quiet_worker: type[QuietProjectWorker]) -> None:
    worker = quiet_worker("--flow", "example_flaky", *FAST, "-v", "2")
    worker.wait_for(" started queue=")
    run_id = start_flow("example_flaky", {"n": 2})
    assert wait_for_run(run_id, timeout=30).status == "completed"
    assert worker.stop() == 0
    err = worker.stderr()
    assert "Traceback (most recent call last)" in err and "in wobble" in err
    assert "DEBUG pgflow_django.worker: claimed" in err


@pytest.mark.parametrize("quiet", [["--log-level", "warning"], ["-v", "0"]])
def test_log_level_and_verbosity_zero_keep_warnings_only(
    quiet_worker: type[QuietProjectWorker], quiet: list[str]
) -> None:
    worker = quiet_worker("--flow", "example_flaky", *FAST, *quiet)
    wait_until(
        lambda: q("select 1 from pgflow.workers where function_name = 'example_flaky'"), 30, "register"
    )
    run_id = start_flow("example_flaky", {"n": 3})
    assert wait_for_run(run_id, timeout=30).status == "completed"
    worker.wait_for("handler failed")
    assert worker.stop() == 0
    err = worker.stderr()
    assert " INFO " not in err and " started queue=" not in err
    assert "WARNING pgflow_django.worker: handler failed" in err


def test_a_project_that_routes_the_logger_gets_each_line_once(quiet_worker: type[QuietProjectWorker]) -> None:
    worker = quiet_worker("--flow", "example_chain", *FAST, env={"FIRST_HOUR_LOGGING": "1"})
    worker.wait_for(" started queue=")
    assert worker.stop() == 0
    assert worker.stderr().count(" started queue=example_chain ") == 1
    assert worker.stderr().count(" stopped queue=example_chain") == 1


def test_stalled_task_recovery_says_what_it_recovered(quiet_worker: type[QuietProjectWorker]) -> None:
    lost = quiet_worker("--flow", "example_sleepy", *FAST)
    lost.wait_for(" started queue=")
    run_id = start_flow("example_sleepy", [{"sleep": 60}])
    wait_until(
        lambda: q("select 1 from pgflow.step_tasks where run_id = %s and status = 'started'", [run_id]),
        30,
        "the task to start",
    )
    lost.process.kill()
    lost.process.wait(10)
    q(
        "update pgflow.step_tasks set started_at = now() - interval '1 hour' where run_id = %s",
        [run_id],
    )
    rescuer = quiet_worker("--flow", "example_sleepy", *FAST, "--stalled-check-seconds", "0.3")
    rescuer.wait_for("stalled-task recovery")
    assert (
        "WARNING pgflow_django.worker: stalled-task recovery (tasks whose worker stopped answering): "
        "1 task(s) requeued" in rescuer.stderr()
    )
    rescuer.process.kill()


def test_the_drain_after_a_signal_is_shown(quiet_worker: type[QuietProjectWorker]) -> None:
    worker = quiet_worker("--flow", "example_sleepy", *FAST)
    worker.wait_for(" started queue=")
    run_id = start_flow("example_sleepy", [{"sleep": 2}])
    wait_until(
        lambda: q("select 1 from pgflow.step_tasks where run_id = %s and status = 'started'", [run_id]),
        30,
        "the task to start",
    )
    assert worker.stop() == 0
    err = worker.stderr()
    assert "SIGTERM: stopped polling; finishing 1 in-flight task(s) within 30s" in err
    assert "draining queue=example_sleepy: 1 task(s) still running" in err
    assert wait_for_run(run_id, timeout=5).status == "completed"
