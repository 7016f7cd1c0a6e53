"""The install line and its system check, through real ``manage.py check`` / ``migrate`` runs on
settings variants (tests/first_hour_settings.py): a half-installed django-pgmigrate is an error naming
the missing apps; leaving django-pgmigrate out altogether works."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pgflow_django.checks import INSTALL_LINE
from tests.first_hour import fresh_database, manage

pytestmark = pytest.mark.django_db(transaction=True)

REPO = Path(__file__).resolve().parents[2]


def test_the_documented_install_line_passes_the_checks() -> None:
    result = manage("check", "--database", "default", "--fail-level", "WARNING")
    assert result.returncode == 0, result.stderr
    output = result.stdout + result.stderr
    assert re.findall(r"\(([a-z_]+\.[A-Z]\d+)\)", output) == ["pgflow.I001"], output  # the report alone


@pytest.mark.parametrize(
    ("apps", "missing"),
    [("pgmigrate", "'pgactivity', 'pglock'"), ("pgactivity,pgmigrate", "'pglock'")],
)
def test_pgmigrate_without_its_companions_is_an_error_naming_them(apps: str, missing: str) -> None:
    """The README's old line (pgmigrate alone) made ``migrate`` crash with LookupError under a lock."""
    result = manage("check", env={"FIRST_HOUR_APPS": apps})
    assert result.returncode == 1
    assert f"(pgflow.E022) INSTALLED_APPS has 'pgmigrate' without {missing}:" in result.stderr
    assert INSTALL_LINE in result.stderr
    assert "Traceback" not in result.stderr


def test_without_pgmigrate_check_is_clean_and_migrate_installs_pgflow() -> None:
    """pgflow's migrations do not use django-pgmigrate: without it, a new database migrates."""
    with fresh_database() as url:
        env = {"FIRST_HOUR_APPS": "", "DATABASE_URL": url}
        check = manage("check", "--database", "default", env=env)
        assert check.returncode == 0, check.stderr
        assert set(re.findall(r"pgflow\.[EW]\d+", check.stderr)) == {"pgflow.W001"}  # not migrated yet
        migrate = manage("migrate", "-v", "0", env=env)
        assert migrate.returncode == 0, migrate.stderr
        after = manage("check", "--database", "default", "--fail-level", "WARNING", env=env)
        assert after.returncode == 0, after.stderr + after.stdout


def test_a_string_lock_timeout_is_an_error() -> None:
    result = manage("check", env={"FIRST_HOUR_LOCK_TIMEOUT": "10s"})
    assert result.returncode == 1
    assert "(pgflow.E023) PGMIGRATE_LOCK_TIMEOUT must be a number of seconds or a timedelta, got '10s'" in (
        result.stderr
    )


@pytest.mark.parametrize("path", ["README.md", "docs/quickstart.md", "docs/django-tasks.md"])
def test_the_docs_show_the_one_install_line(path: str) -> None:
    text = (REPO / path).read_text()
    assert INSTALL_LINE in text
    assert 'INSTALLED_APPS += ["pgmigrate", "pgflow_django"]' not in text
