"""A real ``pgflow_worker`` subprocess on the test database, for tests that need true concurrency.

The child loads the same settings module as the tests and points its database alias at the test
database's name (pytest-django's ``test_...``), so no project has to read a ``DATABASE_URL`` for it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

READY_MARK = " started queue="
"""The worker's start-up line (``worker <id> started queue=...``) says it is polling."""


class WorkerProcess:
    """One worker subprocess with its combined output in a log file."""

    def __init__(
        self, args: list[str], log_path: Path, *, using: str = "default", settings_module: str | None = None
    ) -> None:
        from django.conf import settings
        from django.db import connections

        self.args = list(args)
        self.log_path = log_path
        env = {
            **os.environ,
            "PYTHONUNBUFFERED": "1",
            "PYTHONPATH": os.pathsep.join(path for path in sys.path if path),
            "DJANGO_SETTINGS_MODULE": settings_module
            or os.environ.get("DJANGO_SETTINGS_MODULE")
            or settings.SETTINGS_MODULE,
        }
        self._log = log_path.open("wb")
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "pgflow_django.testing.worker_main",
                using,
                str(connections[using].settings_dict["NAME"]),
                *self.args,
            ],
            cwd=os.getcwd(),
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )

    def __repr__(self) -> str:
        return f"<pgflow_worker pid={self.process.pid} {' '.join(self.args)}>"

    @property
    def pid(self) -> int:
        return self.process.pid

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def wait_ready(self, timeout: float = 60.0) -> WorkerProcess:
        """Wait for the start-up line; a worker that exits or stays silent fails with its log."""
        deadline = time.monotonic() + timeout
        while READY_MARK not in self.log():
            if self.process.poll() is not None:
                code = self.process.returncode
                raise RuntimeError(f"pgflow_worker {' '.join(self.args)} exited with {code}:\n{self.log()}")
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"pgflow_worker {' '.join(self.args)} did not start within {timeout}s:\n{self.log()}"
                )
            time.sleep(0.05)
        return self

    def stop(self, timeout: float = 15.0) -> int | None:
        """Ask it to stop (SIGTERM: finish or release in-flight tasks), then kill it after ``timeout``."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        self._log.close()
        return self.process.returncode
