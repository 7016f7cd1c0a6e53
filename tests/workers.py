"""Real ``manage.py pgflow_worker`` processes for the worker tests, and small polling helpers.

Workers reach the test database through ``DATABASE_URL``, exactly as a deployment would.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any, TypeVar
from urllib.parse import quote

REPO = Path(__file__).resolve().parent.parent
MANAGE = REPO / "testproject" / "manage.py"

T = TypeVar("T")


def url_from_settings(settings_dict: dict[str, Any]) -> str:
    """A libpq URL for a Django ``DATABASES`` entry (the test database's, under pytest-django)."""
    user = quote(settings_dict.get("USER") or "", safe="")
    password = quote(settings_dict.get("PASSWORD") or "", safe="")
    auth = f"{user}:{password}@" if password else (f"{user}@" if user else "")
    host = settings_dict.get("HOST") or ""
    port = settings_dict.get("PORT") or ""
    name = quote(settings_dict["NAME"], safe="")
    if host.startswith("/"):
        return f"postgresql://{auth}/{name}?host={quote(host, safe='')}" + (f"&port={port}" if port else "")
    return f"postgresql://{auth}{host}{':' + str(port) if port else ''}/{name}"


def wait_until(check: Callable[[], T], timeout: float, what: str, interval: float = 0.05) -> T:
    """Poll ``check`` until it returns something truthy; fail naming ``what`` after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


class WorkerProcess:
    """One ``pgflow_worker`` subprocess with its combined output in a log file."""

    def __init__(self, database_url: str, flow: str, args: list[str], log_path: Path) -> None:
        self.flow = flow
        self.args = args
        self.log_path = log_path
        env = {
            **os.environ,
            "DATABASE_URL": database_url,
            "PYTHONUNBUFFERED": "1",
            "PGFLOW_LOG_LEVEL": os.environ.get("PGFLOW_TEST_WORKER_LOG_LEVEL", "INFO"),
        }
        self._log = log_path.open("wb")
        self.process = subprocess.Popen(
            [sys.executable, str(MANAGE), "pgflow_worker", "--flow", flow, *args],
            cwd=REPO,
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )

    @property
    def pid(self) -> int:
        return self.process.pid

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_ready(self, timeout: float = 60.0) -> WorkerProcess:
        def ready() -> bool:
            if self.process.poll() is not None:
                raise AssertionError(f"worker exited with {self.process.returncode}:\n{self.log()}")
            return " started queue=" in self.log()

        wait_until(ready, timeout, f"worker for {self.flow} to start")
        return self

    @property
    def worker_id(self) -> str:
        """The id the worker registered under, read from its start-up log line."""
        match = re.search(r"worker ([0-9a-f-]{36}) started", self.log())
        assert match, f"no start-up line in:\n{self.log()}"
        return match.group(1)

    def signal(self, signum: int) -> None:
        self.process.send_signal(signum)

    def terminate(self) -> None:
        self.signal(signal.SIGTERM)

    def kill(self) -> None:
        self.process.kill()
        self.process.wait(10)

    def wait(self, timeout: float) -> int:
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"worker still running after {timeout}s:\n{self.log()}") from None

    def stop(self) -> None:
        """Teardown: ask nicely, then kill."""
        if self.process.poll() is None:
            self.terminate()
        self.wait_stopped()

    def wait_stopped(self) -> None:
        """Teardown after SIGTERM was sent: wait, then kill (a second SIGTERM is not sent)."""
        if self.process.poll() is None:
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        self._log.close()


def spawn_worker_process(
    database_url: str, *args: str, settings: str, stderr: int | IO[bytes] = subprocess.PIPE, text: bool = True
) -> subprocess.Popen[Any]:
    """A ``pgflow_worker`` subprocess with ``settings``, logging at INFO to ``stderr``."""
    return subprocess.Popen(
        [sys.executable, str(MANAGE), "pgflow_worker", *args],
        cwd=REPO,
        env={
            **os.environ,
            "DATABASE_URL": database_url,
            "DJANGO_SETTINGS_MODULE": settings,
            "PYTHONUNBUFFERED": "1",
            "PYTHONWARNINGS": "ignore",
            "PGFLOW_LOG_LEVEL": "INFO",
        },
        stdout=subprocess.DEVNULL,
        stderr=stderr,
        text=text,
    )


def run_manage(
    database_url: str, *args: str, env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(MANAGE), *args],
        cwd=REPO,
        env={**os.environ, "DATABASE_URL": database_url, "PYTHONUNBUFFERED": "1", **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


EXAMPLE_FLOWS = (
    "example_chain",
    "example_map",
    "example_condition",
    "example_flaky",
    "example_ledger",
    "example_sleepy",
    "example_crawl",
    "example_acrawl",
)


def clean_example_flows(cursor: Any) -> None:
    """Drop the example flows with their runs, queues, ledger and worker rows: worker tests commit
    (other processes must see their data), so they clean up before and after themselves."""
    cursor.execute(
        "select pgflow.delete_flow_and_data(flow_slug) from pgflow.flows where flow_slug = any(%s)",
        [list(EXAMPLE_FLOWS)],
    )
    cursor.execute("delete from example_ledgerentry")
    cursor.execute("delete from pgflow.workers where queue_name = any(%s)", [list(EXAMPLE_FLOWS)])


def wait_recovery_passes(worker: WorkerProcess, passes: int = 2, timeout: float = 30.0) -> None:
    """Wait until ``worker`` (started with ``--log-level debug``) finishes ``passes`` more stalled-task
    recovery passes than it had when called: with two, one pass surely started after the caller's
    change, so "recovery left it alone" is asserted after recovery looked, never before."""
    from pgflow_django.worker.chores.recovery import RECOVERY_PASS_DONE

    before = worker.log().count(RECOVERY_PASS_DONE)
    wait_until(
        lambda: worker.log().count(RECOVERY_PASS_DONE) >= before + passes,
        timeout,
        f"{passes} stalled-task recovery passes of the worker for {worker.flow}",
    )


def stop_all(started: list[Any]) -> None:
    """Stop ``WorkerProcess`` es side by side: SIGTERM to each one still running, then wait for each."""
    for worker in started:
        if worker.process.poll() is None:
            worker.terminate()
    for worker in started:
        worker.wait_stopped()


class Spawner:
    """Starts workers on one database and stops every one of them at teardown."""

    def __init__(self, database_url: str, log_dir: Path) -> None:
        self.database_url = database_url
        self.log_dir = log_dir
        self.started: list[WorkerProcess] = []

    def __call__(self, flow: str, *args: str, ready: bool = True) -> WorkerProcess:
        log = self.log_dir / f"worker-{len(self.started)}-{flow}.log"
        worker = WorkerProcess(self.database_url, flow, list(args), log)
        self.started.append(worker)
        return worker.wait_ready() if ready else worker

    def reused(self, flow: str, *args: str) -> WorkerProcess:
        """The worker already started for ``flow``, else a new one: tests that only need a worker to run
        their flows share one per module instead of paying a start-up each. One that exited, or runs
        with other options (two would race for the flow's tasks), fails the test at once."""
        for worker in self.started:
            if worker.flow != flow:
                continue
            if worker.process.poll() is not None:
                raise AssertionError(
                    f"shared worker exited with {worker.process.returncode}:\n{worker.log()}"
                )
            assert worker.args == list(args), f"a shared worker for {flow} already runs with {worker.args}"
            return worker
        return self(flow, *args)

    def stop_all(self) -> None:
        stop_all(self.started)


def drop_shared_queues(cursor: Any, names: list[str] | None = None) -> None:
    """Drop declared shared queues (all when ``names`` is None) once no flow routes to them: deleting
    a flow never drops a shared queue, so tests that declare some remove them themselves."""
    cursor.execute(
        "select pgmq.drop_queue(sq.queue_name) from pgflow.shared_queues as sq"
        " where (%(names)s::text[] is null or sq.queue_name = any(%(names)s))"
        " and not exists (select 1 from pgflow.steps as s where s.queue_name = sq.queue_name)"
        " and exists (select 1 from pgmq.list_queues() as l where l.queue_name = sq.queue_name)",
        {"names": names},
    )
    cursor.execute(
        "delete from pgflow.shared_queues as sq"
        " where (%(names)s::text[] is null or sq.queue_name = any(%(names)s))"
        " and not exists (select 1 from pgflow.steps as s where s.queue_name = sq.queue_name)",
        {"names": names},
    )


class InProcessWorker:
    """A ``QueueWorker`` on a thread of the test process (real threads, real connections): for the
    tests about what a worker does, which need no process of its own."""

    def __init__(
        self,
        work: Any,
        name: str = "test-worker",
        *,
        poll_interval: float = 0.1,
        ready: bool = True,
        **options: Any,
    ) -> None:
        import threading

        from pgflow_django.worker.options import WorkerOptions
        from pgflow_django.worker.queue_worker import QueueWorker

        self.worker = QueueWorker(work, WorkerOptions.from_settings(poll_interval=poll_interval, **options))
        self.worker.prepare()
        self.thread = threading.Thread(target=self.worker.run, name=name)
        self.thread.start()
        if ready:
            wait_until(lambda: self.worker.ready, 10, f"worker {name} ready")

    def stop(self) -> None:
        self.worker.state.request_stop()
        self.thread.join(30)
        assert not self.thread.is_alive()
