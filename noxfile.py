"""The support matrix and the release checks, as nox sessions (``nox --list`` shows them).

``make test`` runs the whole suite on one combination; CI runs it on the two marked "full" below and
the ``matrix`` sessions (unit + SQL suites) on every other supported Python x Django, alternating the
PostgreSQL 15 server of ``DATABASE_URL`` and the embedded PostgreSQL 18. README's support table lists
the same combinations.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
from pathlib import Path

import nox

nox.options.default_venv_backend = "venv"
nox.options.error_on_missing_interpreters = True
# Interpreters come from this machine (PATH or pyenv), never from a download.
nox.options.download_python = "never"
nox.options.tags = ["matrix"]

ROOT = Path(__file__).resolve().parent

DJANGO = {"5.2": "Django>=5.2,<5.3", "6.0": "Django>=6.0,<6.1", "6.1": "Django>=6.1,<6.2"}

# (python, django, postgresql, suites). "full" is the whole suite, as `make test` runs it.
UNIT_AND_SQL = ("tests/unit", "tests/sql")
PLAN_CHECKS = "tests/sql/plans"
"""Left to the two whole-suite runs: a plan's shape depends on the PostgreSQL version (both are
covered there), not on Python or Django, and its million-run histories take minutes to build."""
COMBINATIONS: list[tuple[str, str, str, tuple[str, ...]]] = [
    ("3.11", "5.2", "15", ("full",)),
    ("3.12", "6.1", "18", ("full",)),
    ("3.12", "5.2", "15", UNIT_AND_SQL),
    ("3.13", "5.2", "18", UNIT_AND_SQL),
    ("3.12", "6.0", "18", UNIT_AND_SQL),
    ("3.13", "6.0", "15", UNIT_AND_SQL),
    ("3.13", "6.1", "15", UNIT_AND_SQL),
]


def interpreter(version: str) -> str:
    """``pythonX.Y`` from PATH when it runs, else pyenv's newest X.Y (its shims need PYENV_VERSION)."""
    name = f"python{version}"
    found = shutil.which(name)
    if found and subprocess.run([found, "-c", ""], capture_output=True).returncode == 0:
        return found
    root = os.environ.get("PYENV_ROOT") or (
        subprocess.run(["pyenv", "root"], capture_output=True, text=True).stdout.strip()
        if shutil.which("pyenv")
        else str(Path.home() / ".pyenv")
    )
    candidates = sorted(
        glob.glob(f"{root}/versions/{version}.*/bin/{name}") if root else [],
        key=lambda path: [int(part) for part in Path(path).parts[-3].split(".") if part.isdigit()],
    )
    return candidates[-1] if candidates else version


def _install(session: nox.Session, django: str) -> None:
    session.install("pip>=25.1")  # dependency groups (PEP 735)
    extra = ["django-tasks>=0.12"] if django == "5.2" else []
    session.install("-e", ".[binary]", "--group", "test", DJANGO[django], *extra)


def _database_env(postgresql: str) -> dict[str, str | None]:
    """PostgreSQL 15: the server of DATABASE_URL (required); 18: the embedded server (no DATABASE_URL)."""
    if postgresql == "18":
        return {"DATABASE_URL": None}
    url = os.environ.get("DATABASE_URL")
    if not url:
        raise RuntimeError(
            "the PostgreSQL 15 sessions need DATABASE_URL (e.g. postgresql://postgres@127.0.0.1:5432/postgres)"
        )
    return {"DATABASE_URL": url}


def xdist_options() -> list[str]:
    """``TEST_WORKERS`` (default 2) pytest-xdist workers, as ``make test`` spreads them; 0 is one process."""
    workers = os.environ.get("TEST_WORKERS", "2")
    if workers == "0":
        return ["-p", "no:xdist"]
    return ["-n", workers, "--dist", "loadgroup", "--no-loadscope-reorder"]


def _suite_session(python: str, django: str, postgresql: str, suites: tuple[str, ...]) -> None:
    full = suites == ("full",)
    tags = ["full"] if full else ["matrix"]
    name = f"{tags[0]}-py{python}-django{django}-pg{postgresql}"
    what = "whole suite" if full else "unit + SQL suites"

    @nox.session(name=name, python=interpreter(python), tags=tags)
    def run(session: nox.Session) -> None:
        _install(session, django)
        session.run(
            "python", "-c", "import django, sys; print('Django', django.__version__, 'on', sys.version)"
        )
        paths = [] if full else [*suites, f"--ignore={PLAN_CHECKS}"]
        session.run(
            "python",
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            *xdist_options(),
            *paths,
            *session.posargs,
            env=_database_env(postgresql),
        )

    run.__doc__ = f"{what}: Python {python}, Django {django}, PostgreSQL {postgresql}"


for _combination in COMBINATIONS:
    _suite_session(*_combination)


@nox.session(python=False)
def docs(session: nox.Session) -> None:
    """The documentation site, built in strict mode (broken links, missing pages and API objects fail)."""
    session.run(
        "mkdocs",
        "build",
        "--strict",
        env={"DATABASE_URL": os.environ.get("DATABASE_URL") or "postgresql://localhost/unused"},
    )


@nox.session(name="wheel_smoke")
def wheel_smoke(session: nox.Session) -> None:
    """The built wheel (``make dist``) in a clean venv: startproject, migrate, one flow run, and
    ``manage.py test`` twice (each must drop its test database)."""
    wheels = sorted(glob.glob(str(ROOT / "dist" / "*.whl")))
    if len(wheels) != 1:
        session.error(f"expected one wheel in dist/ (run make dist), found {len(wheels)}")
    url = os.environ.get("DATABASE_URL")
    if not url:
        session.error("wheel_smoke needs DATABASE_URL: a PostgreSQL server on which it may create a database")
    session.install(f"{wheels[0]}[binary]")
    session.run("python", str(ROOT / ".ci" / "wheel_smoke.py"), url, external=False)
