"""The quickstart's database steps, as written: ``createdb``, then ``check --database default`` (the
versions it found, the migrations left, counted), then ``migrate``, then ``check`` again."""

from __future__ import annotations

import re
import shlex
import subprocess
import uuid
from pathlib import Path

import psycopg
import pytest
from django.db import connection
from psycopg import sql

from tests.first_hour import manage
from tests.support.scratch import server_params
from tests.workers import url_from_settings

pytestmark = pytest.mark.django_db(transaction=True)

QUICKSTART = Path(__file__).resolve().parents[2] / "docs" / "quickstart.md"


def _commands() -> list[str]:
    text = QUICKSTART.read_text(encoding="utf-8")
    block = next(b for b in re.findall(r"```sh\n(.*?)```", text, re.S) if "createdb" in b)
    return [line.split("#")[0].strip() for line in block.splitlines() if line.strip()]


def test_the_quickstart_creates_the_database_before_checking_and_migrating() -> None:
    commands = _commands()
    assert [command.split()[0] for command in commands] == ["createdb", "python", "python"]
    assert commands[1:] == ["python manage.py check --database default", "python manage.py migrate"]


def test_the_quickstart_database_steps_run_as_written() -> None:
    name = f"pgflow_quickstart_{uuid.uuid4().hex[:12]}"
    params = server_params()
    url = url_from_settings({**connection.settings_dict, "NAME": name})
    missing = manage("check", "--database", "default", env={"DATABASE_URL": url})
    assert "(pgflow.E009)" in missing.stderr and f"createdb {name}" in missing.stderr, missing.stderr

    createdb = shlex.split(_commands()[0])
    assert createdb[-1] == "mysite"
    host = ["-h", str(params.get("host") or "127.0.0.1"), "-p", str(params.get("port") or 5432)]
    user = ["-U", str(params.get("user") or "postgres")]
    created = subprocess.run(
        [createdb[0], *host, *user, name], capture_output=True, text=True, timeout=60, check=False
    )
    assert created.returncode == 0, created.stderr
    try:
        before = manage("check", "--database", "default", env={"DATABASE_URL": url})
        assert before.returncode == 0, before.stderr
        output = before.stdout + before.stderr
        warning = re.search(r"\(pgflow\.W001\) (.*)", output)
        assert warning, output
        counted = r"database 'default': \d+ pgflow migration\(s\) not applied "
        assert re.fullmatch(counted + r"\(pgflow\.0001_\w+ to pgflow\.\d{4}_\w+\)", warning[1]), warning[1]
        assert "HINT: run `manage.py migrate --database default`" in output
        assert re.search(
            r"\(pgflow\.I001\) database 'default': PostgreSQL \d+\.\d+, PGMQ not installed yet", output
        )

        migrated = manage("migrate", "--noinput", env={"DATABASE_URL": url}, timeout=300)
        assert migrated.returncode == 0, migrated.stderr
        after = manage("check", "--database", "default", "--fail-level", "WARNING", env={"DATABASE_URL": url})
        assert after.returncode == 0, after.stderr
        assert re.search(
            r"\(pgflow\.I001\) database 'default': PostgreSQL \d+\.\d+, PGMQ .*, pgflow migrated",
            after.stdout + after.stderr,
        )
        assert "W001" not in after.stdout + after.stderr
    finally:
        with psycopg.connect(**params, autocommit=True) as admin:
            admin.execute(sql.SQL("drop database if exists {} with (force)").format(sql.Identifier(name)))
