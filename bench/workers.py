"""Real worker processes (``manage.py pgflow_worker``) for the bench, and a sampler of their memory."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import IO

import psutil

from bench.db import REPO_DIR, connect

MANAGE = REPO_DIR / "testproject" / "manage.py"


class WorkerFailed(RuntimeError):
    """A worker process exited early or never became ready; the message carries its log tail."""


class RssSampler:
    """Samples the resident memory of registered processes (and their children) from a thread."""

    def __init__(self, interval: float = 0.05) -> None:
        self.interval = interval
        self.peak_bytes: dict[int, int] = {}
        self._procs: dict[int, psutil.Process] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def watch(self, pid: int) -> None:
        with self._lock:
            self._procs[pid] = psutil.Process(pid)
            self.peak_bytes.setdefault(pid, 0)

    def sample(self) -> None:
        with self._lock:
            procs = list(self._procs.items())
        for pid, proc in procs:
            try:
                rss = proc.memory_info().rss + sum(
                    child.memory_info().rss for child in proc.children(recursive=True)
                )
            except psutil.Error:
                with self._lock:
                    self._procs.pop(pid, None)
                continue
            with self._lock:
                self.peak_bytes[pid] = max(self.peak_bytes.get(pid, 0), rss)

    def peak_mb(self, pids: Sequence[int] | None = None) -> float:
        """The largest RSS seen, in MB (10^6 bytes), over ``pids`` (all watched processes when None)."""
        with self._lock:
            values = [v for pid, v in self.peak_bytes.items() if pids is None or pid in pids]
        return max(values, default=0) / 1_000_000

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()


class WorkerGroup:
    """``count`` worker processes of one flow (or, with ``serve_all``, of every flow of the bench
    project), started together, stopped with SIGTERM on exit."""

    def __init__(
        self,
        *,
        url: str,
        flow_slug: str,
        count: int,
        log_dir: Path,
        sampler: RssSampler,
        extra_args: Sequence[str] = (),
        settings_module: str = "bench.settings",
        serve_all: bool = False,
    ) -> None:
        self.url = url
        self.serve_all = serve_all
        self.settings_module = settings_module
        self.flow_slug = flow_slug
        self.count = count
        self.log_dir = log_dir
        self.sampler = sampler
        self.extra_args = list(extra_args)
        self.procs: list[subprocess.Popen[bytes]] = []
        self._logs: list[IO[bytes]] = []

    @property
    def pids(self) -> list[int]:
        return [proc.pid for proc in self.procs]

    def __enter__(self) -> WorkerGroup:
        env = dict(os.environ)
        env.update(
            DATABASE_URL=self.url,
            DJANGO_SETTINGS_MODULE=self.settings_module,
            PGFLOW_LOG_LEVEL=env.get("PGFLOW_LOG_LEVEL", "WARNING"),
            PYTHONUNBUFFERED="1",
        )
        selection = [] if self.serve_all else ["--flow", self.flow_slug]
        command = [sys.executable, str(MANAGE), "pgflow_worker", *selection, *self.extra_args]
        self.log_dir.mkdir(parents=True, exist_ok=True)
        for index in range(self.count):
            log = (self.log_dir / f"{self.flow_slug}-{self.count}w-{index}.log").open("wb")
            self._logs.append(log)
            proc = subprocess.Popen(command, env=env, cwd=REPO_DIR, stdout=log, stderr=subprocess.STDOUT)
            self.procs.append(proc)
            self.sampler.watch(proc.pid)
        return self

    def check_alive(self) -> None:
        for proc in self.procs:
            if proc.poll() is not None:
                raise WorkerFailed(
                    f"worker pid {proc.pid} exited with {proc.returncode}:\n{self.log_tail(proc)}"
                )

    def wait_registered(self, timeout: float) -> None:
        """Until every process has a live row in pgflow.workers for this flow's queue (or for several
        queues, ``*``, when it serves every flow)."""
        deadline = time.monotonic() + timeout
        with connect(self.url) as conn:
            while True:
                self.check_alive()
                row = conn.execute(
                    "select count(*) from pgflow.workers where queue_name = %s and stopped_at is null",
                    ["*" if self.serve_all else self.flow_slug],
                ).fetchone()
                if row and row[0] >= self.count:
                    return
                if time.monotonic() > deadline:
                    raise WorkerFailed(
                        f"{self.count} worker(s) of {self.flow_slug} not registered after {timeout:.0f} s:\n"
                        + "\n".join(self.log_tail(proc) for proc in self.procs)
                    )
                time.sleep(0.02)

    def log_tail(self, proc: subprocess.Popen[bytes], lines: int = 30) -> str:
        index = self.procs.index(proc)
        self._logs[index].flush()
        text = Path(self._logs[index].name).read_text(errors="replace")
        return "\n".join(text.splitlines()[-lines:])

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.sampler.sample()
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 30
        for proc in self.procs:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for log in self._logs:
            log.close()
