"""SQL shipped as package files: the current schema (one object per file), frozen migration deltas and the
upgrade preflight's audits (read by ``pgflow_django.db.upgrade``, never run as a migration step)."""

from __future__ import annotations

from pathlib import Path

SQL_ROOT = Path(__file__).resolve().parent
SCHEMA_DIR = SQL_ROOT / "schema"
MIGRATIONS_DIR = SQL_ROOT / "migrations"
AUDITS_DIR = SQL_ROOT / "audits"


def migration_sql(name: str) -> str:
    """Text of one frozen migration delta, e.g. ``0002_core.sql``."""
    return (MIGRATIONS_DIR / name).read_text(encoding="utf-8")


def schema_files() -> list[Path]:
    """The current schema's files in install order (their names sort in dependency order)."""
    return sorted(SCHEMA_DIR.glob("*.sql"))


def schema_sql() -> str:
    """The whole current schema as one script."""
    return "\n".join(path.read_text(encoding="utf-8") for path in schema_files())
