"""CPU seconds spent by processes over a window: where the time goes, PostgreSQL side versus Python side.

PostgreSQL backends are only measurable when the server runs on this machine and its processes are
readable (root, or the same user); otherwise the PostgreSQL figures are left out (None).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import psutil

_LOCAL_SERVER = """
select inet_server_addr() is null or host(inet_server_addr()) in ('127.0.0.1', '::1')
"""


class CpuMeter:
    """CPU (user + system) of a fixed set of processes between ``start()`` and ``stop()``."""

    def __init__(self, pids: Iterable[int]) -> None:
        self.procs: list[psutil.Process] = []
        for pid in pids:
            try:
                self.procs.append(psutil.Process(pid))
            except psutil.Error:
                continue
        self._start: dict[int, float] = {}

    @staticmethod
    def _cpu(proc: psutil.Process) -> float | None:
        try:
            times = proc.cpu_times()
        except psutil.Error:
            return None
        return float(times.user + times.system)

    def start(self) -> CpuMeter:
        for proc in self.procs:
            value = self._cpu(proc)
            if value is not None:
                self._start[proc.pid] = value
        return self

    def stop(self) -> float | None:
        """Seconds of CPU used since ``start()``; None when no process could be read."""
        total = 0.0
        read = False
        for proc in self.procs:
            value = self._cpu(proc)
            began = self._start.get(proc.pid)
            if value is not None and began is not None:
                total += value - began
                read = True
        return total if read else None


def local_backend_pids(conn: Any, where: str = "true", params: Iterable[Any] = ()) -> list[int] | None:
    """Pids of this database's backends matching ``where`` (on pg_stat_activity), if they run here."""
    row = conn.execute(_LOCAL_SERVER).fetchone()
    if not row or not row[0]:
        return None
    pids = [
        int(pid)
        for (pid,) in conn.execute(
            f"select pid from pg_stat_activity where datname = current_database() and ({where})",
            list(params),
        )
    ]
    readable = []
    for pid in pids:
        try:
            proc = psutil.Process(pid)
            if "postgres" in proc.name() or "postgres" in " ".join(proc.cmdline()[:1]):
                proc.cpu_times()
                readable.append(pid)
        except psutil.Error:
            continue
    return readable if readable or not pids else None


def own_backend_pid(conn: Any) -> int | None:
    """This connection's backend pid when the server is local and readable."""
    pids = local_backend_pids(conn, "pid = pg_backend_pid()")
    return pids[0] if pids else None
