"""A private PgBouncer in transaction pooling mode in front of the test database's server.

Debian's ``pgbouncer`` on a free port of 127.0.0.1, trust auth (the shared server trusts local
connections), a temporary ini and userlist; tests skip with the install line when it is absent.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest

INSTALL = "apt-get install -y pgbouncer"
PATHS = ("/usr/sbin/pgbouncer", "/usr/bin/pgbouncer")


def executable() -> str:
    """The pgbouncer binary, or a skip naming the package to install."""
    found = shutil.which("pgbouncer") or next((path for path in PATHS if os.path.exists(path)), None)
    if found is None:
        pytest.skip(f"pgbouncer is not installed: {INSTALL}")
    return found


def free_port() -> int:
    with contextlib.closing(socket.socket()) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class PgBouncer:
    """One pgbouncer process; ``url(direct_url)`` is the same database through it."""

    def __init__(
        self, server_host: str, server_port: int, user: str, pool_size: int = 4, run_as: str = "postgres"
    ) -> None:
        """``run_as``: the system user pgbouncer runs as when started by root (it refuses root); a
        server's own user reaches its socket directory."""
        self.binary = executable()
        self.root = Path(tempfile.mkdtemp(prefix="pgflow-pgbouncer-"))
        self.port = free_port()
        self.user = user
        self.run_as = run_as
        (self.root / "userlist.txt").write_text(f'"{user}" ""\n')
        # a small pool: several clients share each server connection, so a statement prepared on one
        # transaction's server connection is missing from the next one's
        (self.root / "pgbouncer.ini").write_text(
            "[databases]\n"
            f"* = host={server_host} port={server_port}\n"
            "[pgbouncer]\n"
            f"listen_addr = 127.0.0.1\nlisten_port = {self.port}\nunix_socket_dir =\n"
            f"auth_type = trust\nauth_file = {self.root / 'userlist.txt'}\n"
            f"pool_mode = transaction\ndefault_pool_size = {pool_size}\nmax_client_conn = 200\n"
            f"logfile = {self.root / 'pgbouncer.log'}\npidfile = {self.root / 'pgbouncer.pid'}\n"
            "ignore_startup_parameters = extra_float_digits,options\n"
            "server_reset_query =\n"
        )
        if os.geteuid() == 0:
            shutil.chown(self.root, run_as)
            for name in ("userlist.txt", "pgbouncer.ini"):
                shutil.chown(self.root / name, run_as)
        self.process: subprocess.Popen[bytes] | None = None
        self.start()

    def start(self) -> None:
        user = ["-u", self.run_as] if os.geteuid() == 0 else []
        self.process = subprocess.Popen([self.binary, "-q", *user, str(self.root / "pgbouncer.ini")])
        deadline = time.monotonic() + 15
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port), 0.2):
                return
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"pgbouncer did not start:\n{self.log()}")
            time.sleep(0.05)

    def stop(self) -> None:
        """Immediate shutdown (SIGTERM): every client and server connection is cut."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        self.process = None

    def restart(self) -> None:
        self.stop()
        self.start()

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)

    def log(self) -> str:
        path = self.root / "pgbouncer.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def url(self, direct_url: str) -> str:
        """``direct_url``'s database through this pooler (its host, port and socket replaced)."""
        parts = urlsplit(direct_url)
        return f"postgresql://{self.user}@127.0.0.1:{self.port}{parts.path}"
