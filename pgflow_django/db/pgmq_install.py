"""Make PGMQ available: reuse a verified install, else CREATE EXTENSION, else the bundled SQL-only install.

An existing ``pgmq`` schema is never installed over: it is probed for every function signature this
app calls (those of PGMQ >= 1.11) and rejected with one clear error when something is missing.

The SQL-only installs are PGMQ's own ``pgmq.sql``, shipped unchanged in ``pgflow_django/sql/pgmq/<version>/``
(with PGMQ's licence): ``BUNDLED_PGMQ_VERSION`` is the one ``migrate`` runs, the others are the older
releases the migration tests install.
"""

from __future__ import annotations

from importlib.resources import files
from typing import Any

MIN_PGMQ_VERSION = "1.11"
BUNDLED_PGMQ_VERSION = "1.13.0"
"""The PGMQ whose SQL-only install ``migrate`` runs where the database has none and the server offers
no extension."""

REQUIRED_FUNCTIONS: tuple[str, ...] = (
    "pgmq.create(text)",
    "pgmq.drop_queue(text)",
    "pgmq.validate_queue_name(text)",
    "pgmq.list_queues()",
    "pgmq.format_table_name(text,text)",
    "pgmq.send_batch(text,jsonb[],integer)",
    "pgmq.send_batch(text,jsonb[],jsonb[],integer)",
    "pgmq.read(text,integer,integer,jsonb)",
    "pgmq.archive(text,bigint[])",
    "pgmq.delete(text,bigint[])",
    "pgmq.set_vt(text,bigint[],integer)",
    "pgmq.enable_notify_insert(text,integer)",
)


class PgmqUnavailable(RuntimeError):
    """No usable PGMQ: the message says what was found and how to fix it."""


def missing_functions(cursor: Any) -> list[str]:
    """Signatures from REQUIRED_FUNCTIONS that the database does not have."""
    cursor.execute(
        "select sig from unnest(%s::text[]) as sig where to_regprocedure(sig) is null",
        [list(REQUIRED_FUNCTIONS)],
    )
    return [row[0] for row in cursor.fetchall()]


def _schema_exists(cursor: Any) -> bool:
    cursor.execute("select exists (select 1 from pg_namespace where nspname = 'pgmq')")
    return bool(cursor.fetchone()[0])


def _extension_available(cursor: Any) -> bool:
    cursor.execute("select exists (select 1 from pg_available_extensions where name = 'pgmq')")
    return bool(cursor.fetchone()[0])


def bundled_versions() -> list[str]:
    """The PGMQ versions whose SQL-only install this package ships, oldest first."""
    folder = files("pgflow_django.sql").joinpath("pgmq")
    found = [entry.name for entry in folder.iterdir() if entry.joinpath("pgmq.sql").is_file()]
    return sorted(found, key=lambda version: tuple(int(part) for part in version.split(".")))


def bundled_sql(version: str = BUNDLED_PGMQ_VERSION) -> str:
    """PGMQ's SQL-only install of ``version``, as shipped in ``pgflow_django/sql/pgmq/``."""
    return files("pgflow_django.sql").joinpath("pgmq", version, "pgmq.sql").read_text(encoding="utf-8")


def _verify(cursor: Any, source: str) -> None:
    missing = missing_functions(cursor)
    if missing:
        raise PgmqUnavailable(
            f"{source} lacks {', '.join(missing)}; pgflow needs PGMQ >= {MIN_PGMQ_VERSION}: "
            "upgrade PGMQ (ALTER EXTENSION pgmq UPDATE) and migrate again"
        )


def ensure_pgmq(cursor: Any) -> str:
    """Install or verify PGMQ and say which path was taken ('existing', 'extension' or 'bundled')."""
    if _schema_exists(cursor):
        _verify(cursor, "the existing pgmq schema")
        return "existing"
    if _extension_available(cursor):
        cursor.execute("create extension if not exists pgmq")
        _verify(cursor, "the pgmq extension offered by this server")
        return "extension"
    try:
        sql = bundled_sql()
    except OSError as exc:
        raise PgmqUnavailable(
            "PGMQ is not installed, the server offers no pgmq extension and the SQL-only install bundled "
            f"with pgflow-django could not be read ({exc}); install the pgmq extension, or reinstall "
            "pgflow-django"
        ) from exc
    cursor.execute(sql)
    _verify(cursor, f"the bundled PGMQ {BUNDLED_PGMQ_VERSION} install")
    return "bundled"
