"""A new project's own tests, run as its developer runs them: ``manage.py test`` twice in a row, then
pytest-django, in a ``django-admin startproject`` project with the quickstart's ``INSTALLED_APPS``
(django-pgmigrate's three apps and pgflow) on this test server.

Each run must exit 0 and drop its test database. django-pgmigrate's ``migrate`` runs under a lock
watcher thread whose database session outlived it, so the test runner's ``DROP DATABASE`` failed
with "being accessed by other users", the test database stayed behind, and the next
``manage.py test`` stopped at Django's "Type 'yes'" prompt (EOFError without a terminal).

Whether it failed depended on timing, made certain here: the watcher checks every 0.05 s (so it
runs during ``migrate``), and the first ``manage.py test`` and the pytest run have the garbage
collector off (see ``WITHOUT_COLLECTOR``).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from django.db import connection
from psycopg import sql

from tests.support.scratch import empty_database, server_params

pytestmark = pytest.mark.slow

SHOP_TESTS = """
from django.test import TestCase


class TrivialTests(TestCase):
    def test_arithmetic(self):
        self.assertEqual(1 + 1, 2)
"""
"""As small as a first test is: a test that allocates more lets the garbage collector run, which
hid the leftover session on some runs."""


def settings_tail(name: str) -> str:
    """The quickstart's settings, on this test server; django-pgmigrate's lock watcher checks every
    0.05 s instead of every second, so that it runs during ``migrate`` even when the machine is fast
    enough to migrate in less than a second."""
    own = connection.settings_dict
    database = {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": name,
        "USER": own.get("USER") or "",
        "PASSWORD": own.get("PASSWORD") or "",
        "HOST": own.get("HOST") or "",
        "PORT": str(own.get("PORT") or ""),
    }
    return textwrap.dedent(f"""
        INSTALLED_APPS += ["pgactivity", "pglock", "pgmigrate", "pgflow_django", "shop"]
        PGMIGRATE_LOCK_TIMEOUT = 10
        PGFLOW = {{"FLOWS": []}}
        DATABASES = {{"default": {database!r}}}
        PGMIGRATE_BLOCKING_ACTION_INTERVAL = 0.05
    """)


@pytest.fixture
def new_project(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """A startproject project with an app that has one TestCase; the name of its (empty) database."""
    root = tmp_path / "site"
    root.mkdir()
    subprocess.run([sys.executable, "-m", "django", "startproject", "mysite", str(root)], check=True)
    (root / "shop").mkdir()
    (root / "shop" / "__init__.py").write_text("")
    (root / "shop" / "tests.py").write_text(SHOP_TESTS)
    (root / "pytest.ini").write_text(
        "[pytest]\nDJANGO_SETTINGS_MODULE = mysite.settings\npython_files = tests.py\n"
    )
    params = server_params()
    with empty_database("newproject", params) as name:
        with (root / "mysite" / "settings.py").open("a") as settings:
            settings.write(settings_tail(name))
        try:
            yield root, name
        finally:
            with psycopg.connect(**params, autocommit=True) as admin:
                admin.execute(
                    sql.SQL("drop database if exists {} with (force)").format(sql.Identifier(f"test_{name}"))
                )


WITHOUT_COLLECTOR = (
    "import gc, runpy, sys; gc.disable(); args = sys.argv[1:]; "
    "sys.argv = args[1:] if args[0] == '-m' else args; "
    "runpy.run_module(args[1], run_name='__main__', alter_sys=True) if args[0] == '-m' "
    "else runpy.run_path(args[0], run_name='__main__')"
)
"""``python -c WITHOUT_COLLECTOR manage.py test`` is ``python manage.py test`` with the garbage collector
off: a session left open stays open, where with the collector on it may be freed in time by luck."""


def run(root: Path, *args: str, collector: bool = True) -> subprocess.CompletedProcess[str]:
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in {"DJANGO_SETTINGS_MODULE", "DATABASE_URL"}
    }
    return subprocess.run(
        [sys.executable, *([] if collector else ["-c", WITHOUT_COLLECTOR]), *args],
        cwd=root,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=300,
    )


def leftover(name: str) -> bool:
    """Whether the test database of ``name`` is still there."""
    with psycopg.connect(**server_params(), autocommit=True) as admin:
        row = admin.execute(
            "select count(*) from pg_database where datname = %s", [f"test_{name}"]
        ).fetchone()
    return bool(row and row[0])


def test_manage_py_test_twice_then_pytest_django(new_project: tuple[Path, str]) -> None:
    root, name = new_project
    for attempt in (1, 2):
        result = run(root, "manage.py", "test", collector=attempt == 2)
        output = result.stdout + result.stderr
        assert result.returncode == 0, f"manage.py test #{attempt}:\n{output}"
        assert "Ran 1 test" in output and "OK" in output, output
        assert not leftover(name), f"manage.py test #{attempt} left test_{name} behind:\n{output}"

    result = run(root, "-m", "pytest", "-q", "-p", "no:cacheprovider", collector=False)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "1 passed" in output and "teardown test databases" not in output, output
    assert not leftover(name), f"pytest left test_{name} behind:\n{output}"
