"""Migrations stay trustworthy: the models need no new Django migration, released SQL never changes,
and each down delta restores exactly the catalog of the step before it.

* ``makemigrations --check`` finds nothing to write (a model edited without its migration fails here).
* Every frozen file of a released migration (deltas, down deltas, audits) keeps the sha256 recorded
  in ``released_sql.sha256``; a release adds its own files there.
* On a scratch database, every pgflow migration in order is applied up, its catalog taken, its down
  delta applied, and the catalog compared with the one before it went up; then it goes up again and
  the next one follows. A down delta that forgets an object, or restores a stale definition, shows
  up at its own step, not only once everything is rolled back.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from django.core.management import call_command
from django.db.migrations.loader import MigrationLoader
from django.db.migrations.operations.special import RunSQL

from pgflow_django.db.catalog import Snapshot, diff, snapshot
from pgflow_django.sql import SQL_ROOT
from tests.support.scratch import scratch_database, server_params

APP = "pgflow"
HASHES = Path(__file__).with_name("released_sql.sha256")
_RELEASED_THROUGH = re.compile(r"^# released-through: ([0-9]{4})$", re.MULTILINE)


def _recorded() -> tuple[str, dict[str, str]]:
    text = HASHES.read_text(encoding="utf-8")
    found = _RELEASED_THROUGH.search(text)
    assert found, f"{HASHES.name} names no '# released-through: NNNN' line"
    hashes: dict[str, str] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            digest, path = line.split(maxsplit=1)
            hashes[path] = digest
    return found.group(1), hashes


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.django_db
def test_models_need_no_new_migration() -> None:
    call_command("makemigrations", check=True, dry_run=True, verbosity=0)


def test_released_sql_files_are_unchanged() -> None:
    _, hashes = _recorded()
    assert len(hashes) >= 14
    changed = {path: "missing" for path in hashes if not (SQL_ROOT / path).is_file()}
    changed |= {
        path: "edited"
        for path, digest in hashes.items()
        if path not in changed and _sha256(SQL_ROOT / path) != digest
    }
    assert changed == {}, "a released migration file changed: write a new migration instead"


def test_every_released_sql_file_is_hash_locked() -> None:
    through, hashes = _recorded()
    released = sorted(
        str(path.relative_to(SQL_ROOT))
        for folder in ("migrations", "audits")
        for path in (SQL_ROOT / folder).glob("*.sql")
        if path.name[:4] <= through
    )
    assert released, "no released SQL file found"
    assert [path for path in released if path not in hashes] == []


def test_the_lock_sees_an_edit(tmp_path: Path) -> None:
    edited = tmp_path / "0002_core.sql"
    edited.write_bytes((SQL_ROOT / "migrations" / "0002_core.sql").read_bytes() + b"\n-- edited\n")
    assert _sha256(edited) != _recorded()[1]["migrations/0002_core.sql"]


def _plan() -> list[tuple[str, list[str], list[str]]]:
    """(name, up statements, down statements) of each pgflow migration, in the order they apply."""
    loader = MigrationLoader(None, ignore_no_migrations=True)
    leaves = [key for key in loader.graph.leaf_nodes() if key[0] == APP]
    assert len(leaves) == 1, f"pgflow migrations have {len(leaves)} leaves: {leaves}"
    steps: list[tuple[str, list[str], list[str]]] = []
    for app, name in loader.graph.forwards_plan(leaves[0]):
        if app != APP:
            continue
        operations = [op for op in loader.graph.nodes[(app, name)].operations if isinstance(op, RunSQL)]
        up = [str(op.sql) for op in operations]
        down = [str(op.reverse_sql) for op in reversed(operations) if op.reverse_sql != RunSQL.noop]
        assert len(down) == len(up), f"{name} runs SQL without a down delta"
        steps.append((name, up, down))
    return steps


@pytest.fixture(scope="module")
def scratch(django_db_setup: None, django_db_blocker: Any) -> Iterator[psycopg.Connection[Any]]:
    """A fresh database on the test server with PGMQ installed as migration 0001 does; dropped afterwards."""
    with django_db_blocker.unblock():
        params = server_params()
    with scratch_database("steps", params) as conn:
        yield conn


def _run(conn: psycopg.Connection[Any], statements: list[str]) -> None:
    with conn.transaction(), conn.cursor() as cursor:
        for statement in statements:
            cursor.execute(statement.encode("utf-8"))


def _catalog(conn: psycopg.Connection[Any]) -> Snapshot:
    with conn.cursor() as cursor:
        return snapshot(cursor)


def test_each_down_delta_restores_the_catalog_of_the_step_before(scratch: psycopg.Connection[Any]) -> None:
    plan = _plan()
    assert [name for name, _, _ in plan][:2] == ["0001_pgmq", "0002_core"]
    failures: dict[str, list[str]] = {}
    checked = 0
    for name, up, down in plan:
        before = _catalog(scratch)
        _run(scratch, up)
        if not down:
            continue
        after = _catalog(scratch)
        assert after != before, f"{name} changed nothing in schema pgflow"
        _run(scratch, down)
        lines = diff(before, _catalog(scratch))
        if lines:
            failures[name] = lines
        _run(scratch, up)
        checked += 1
    assert checked >= 6
    assert failures == {}, "a down delta does not restore the previous step's catalog"


def test_the_step_check_sees_a_down_delta_that_forgets_an_object(scratch: psycopg.Connection[Any]) -> None:
    with scratch.transaction(force_rollback=True):
        before = _catalog(scratch)
        scratch.execute("create function pgflow.step_probe() returns int language sql as $$ select 1 $$")
        assert diff(before, _catalog(scratch)) != []
