"""The installed wheel as a new user meets it: ``django-admin startproject``, an app with a flow,
``migrate``, ``pgflow_start`` and a worker, then the run's output checked; then the project's own
tests with ``manage.py test``, twice (each run must drop its test database, or the next one stops
at Django's "Type 'yes'" prompt).

Usage: ``python .ci/wheel_smoke.py SERVER_URL`` with the interpreter of a clean venv that has only the
wheel installed (``nox -s wheel_smoke`` does both). It creates a database of its own on SERVER_URL's
server and drops it again; nothing of this checkout is importable from the project it makes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import textwrap
import uuid
from pathlib import Path

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict

FLOWS = """
from pgflow_django import Flow

smoke = Flow("wheel_smoke", max_attempts=2, base_delay=1, timeout=30)


@smoke.step()
def split(order):
    return order["items"]


@smoke.map(array=split)
def price(item):
    return item * 10


@smoke.step(depends_on=[price])
def total(deps):
    return sum(deps["price"])
"""


TESTS = """
from django.test import TestCase


class SmokeTests(TestCase):
    def test_arithmetic(self):
        self.assertEqual(1 + 1, 2)
"""


def manage(project: Path, *args: str, timeout: float = 300) -> str:
    result = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=project,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if result.returncode != 0:
        raise SystemExit(
            f"wheel smoke: manage.py {' '.join(args)} exited {result.returncode}\n"
            f"{result.stdout}\n{result.stderr}"
        )
    return result.stdout


def settings_tail(params: dict[str, object], name: str) -> str:
    database = {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": name,
        "USER": params.get("user") or "",
        "PASSWORD": params.get("password") or "",
        "HOST": params.get("host") or "",
        "PORT": str(params.get("port") or ""),
    }
    return textwrap.dedent(f"""
        INSTALLED_APPS += ["pgactivity", "pglock", "pgmigrate", "pgflow_django", "shop"]
        DATABASES = {{"default": {database!r}}}
        PGMIGRATE_LOCK_TIMEOUT = 30
        PGMIGRATE_BLOCKING_ACTION_INTERVAL = 0.05  # its lock watcher checks during migrate, however fast
    """)


def smoke(server_url: str, root: Path) -> None:
    import pgflow_django

    where = Path(pgflow_django.__file__).resolve()
    if "site-packages" not in where.parts:
        raise SystemExit(f"wheel smoke: pgflow_django is imported from {where}, not from an installed wheel")
    print(f"wheel smoke: pgflow_django from {where.parent}")

    subprocess.run([sys.executable, "-m", "django", "startproject", "site_smoke", str(root)], check=True)
    (root / "shop").mkdir()
    (root / "shop" / "__init__.py").write_text("")
    (root / "shop" / "flows.py").write_text(FLOWS)
    (root / "shop" / "tests.py").write_text(TESTS)

    name = f"pgflow_wheel_smoke_{uuid.uuid4().hex[:8]}"
    params = conninfo_to_dict(server_url)
    with (root / "site_smoke" / "settings.py").open("a") as settings:
        settings.write(settings_tail(params, name))

    with psycopg.connect(server_url, autocommit=True) as admin:
        admin.execute(sql.SQL("create database {}").format(sql.Identifier(name)))
    try:
        manage(root, "check")
        manage(root, "migrate", "--noinput")
        manage(root, "pgflow_compile")
        run_id = manage(root, "pgflow_start", "wheel_smoke", "--input", '{"items": [1, 2, 3]}').strip()
        manage(root, "pgflow_worker", "--flow", "wheel_smoke", "--until-empty", timeout=120)
        run = json.loads(manage(root, "pgflow_runs", run_id, "--format", "json"))
        if run["status"] != "completed" or run["output"] != {"total": 60}:
            raise SystemExit(f"wheel smoke: run {run_id} ended {run['status']} with output {run['output']!r}")
        print(f"wheel smoke: run {run_id} completed with output {run['output']}")
        for attempt in (1, 2):
            manage(root, "test")
            with psycopg.connect(server_url, autocommit=True) as admin:
                left = admin.execute(
                    "select 1 from pg_database where datname = %s", [f"test_{name}"]
                ).fetchone()
            if left:
                raise SystemExit(f"wheel smoke: manage.py test #{attempt} left database test_{name} behind")
        print("wheel smoke: manage.py test passed twice and dropped its test database")
    finally:
        with psycopg.connect(server_url, autocommit=True) as admin:
            for database in (name, f"test_{name}"):
                admin.execute(
                    sql.SQL("drop database if exists {} with (force)").format(sql.Identifier(database))
                )


def main() -> None:
    if len(sys.argv) != 2:
        raise SystemExit("usage: python .ci/wheel_smoke.py SERVER_URL")
    os.environ.pop("DJANGO_SETTINGS_MODULE", None)
    with tempfile.TemporaryDirectory(prefix="pgflow-wheel-smoke-") as tmp:
        smoke(sys.argv[1], Path(tmp))


if __name__ == "__main__":
    main()
