"""The support matrix and the release checks, as nox sessions (``nox --list`` shows them).

``make test`` runs the whole suite on one combination; CI runs it on the two marked "full" below and
the ``matrix`` sessions (unit + SQL suites) on every other supported Python x Django, alternating the
PostgreSQL 15 server of ``DATABASE_URL`` and the embedded PostgreSQL 18. README's support table lists
the same combinations.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import tomllib
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import nox
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

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


def _pytest(session: nox.Session, paths: list[str], env: dict[str, str | None]) -> None:
    """pytest on ``paths`` (and the session's own arguments) with make test's workers."""
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
        env=env,
    )


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
        _pytest(session, paths, _database_env(postgresql))

    run.__doc__ = f"{what}: Python {python}, Django {django}, PostgreSQL {postgresql}"


for _combination in COMBINATIONS:
    _suite_session(*_combination)


FLOORS_PYTHON = "3.11"
"""The lowest supported Python, the one every floor was released for."""


def floors() -> dict[str, str]:
    """Each requirement's lowest declared version (``>=X`` becomes ``==X``) from pyproject.toml: the
    package's dependencies and every extra, with ``psycopg[binary]``'s build pinned to psycopg's."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = [*project["dependencies"]]
    for extra in project["optional-dependencies"].values():
        declared.extend(extra)
    pins: dict[str, str] = {}
    for text in declared:
        requirement = Requirement(text)
        lowest = [spec.version for spec in requirement.specifier if spec.operator == ">="]
        if len(lowest) != 1:
            raise ValueError(f"{text!r} in pyproject.toml declares no floor (>=)")
        names = [requirement.name, *(f"{requirement.name}-{extra}" for extra in requirement.extras)]
        for name in names:
            name = str(canonicalize_name(name))
            if pins.setdefault(name, lowest[0]) != lowest[0]:
                raise ValueError(f"{name} has two floors in pyproject.toml: {pins[name]} and {lowest[0]}")
    return pins


def installed(session: nox.Session) -> dict[str, str]:
    """The session venv's distributions, by canonical name."""
    listing = session.run("python", "-m", "pip", "list", "--format=json", silent=True)
    assert isinstance(listing, str)
    return {str(canonicalize_name(row["name"])): row["version"] for row in json.loads(listing)}


def _private_database(url: str, name: str) -> str:
    """``url`` naming database ``name``: a session that may run beside another on the same server gets
    test databases of its own (``test_<name>_gw0``, ...)."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"/{name}"))


@nox.session(
    name=f"floors-py{FLOORS_PYTHON}-django5.2-pg15",
    python=interpreter(FLOORS_PYTHON),
    tags=["matrix", "floors"],
    reuse_venv=False,
)
def floors_session(session: nox.Session) -> None:
    """unit + SQL suites: every dependency and extra at its declared floor, Python 3.11, PostgreSQL 15."""
    pins = floors()
    constraints = Path(session.create_tmp()) / "floors.txt"
    constraints.write_text("".join(f"{name}=={version}\n" for name, version in sorted(pins.items())))
    extras = ",".join(
        tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    )
    session.install("pip>=25.1")  # dependency groups (PEP 735)
    session.install("-c", str(constraints), "-e", f".[{extras}]", "--group", "test")
    found = installed(session)
    wrong = {
        name: (version, found.get(name))
        for name, version in pins.items()
        if found.get(name) is None or Version(found[name]) != Version(version)
    }
    if wrong:
        session.error(f"not installed at their floors (floor, installed): {wrong}")
    session.log("floors: " + ", ".join(f"{name} {found[name]}" for name in sorted(pins)))
    database = _private_database(_database_env("15")["DATABASE_URL"] or "", "pgflow_floors")
    _pytest(session, [*UNIT_AND_SQL, f"--ignore={PLAN_CHECKS}"], {"DATABASE_URL": database})


@nox.session(python=False)
def docs(session: nox.Session) -> None:
    """The documentation site, built in strict mode (broken links, missing pages and API objects fail)."""
    session.run(
        "mkdocs",
        "build",
        "--strict",
        env={"DATABASE_URL": os.environ.get("DATABASE_URL") or "postgresql://localhost/unused"},
    )


READTHEDOCS = yaml.safe_load((ROOT / ".readthedocs.yaml").read_text())
"""The hosted docs build (pgflow-django.readthedocs.io): its Python, its install lines, its build commands."""


@nox.session(
    name="readthedocs",
    python=interpreter(str(READTHEDOCS["build"]["tools"]["python"])),
    reuse_venv=False,
)
def readthedocs(session: nox.Session) -> None:
    """The documentation site as Read the Docs builds it: a clean venv, .readthedocs.yaml's install lines."""
    jobs = READTHEDOCS["build"]["jobs"]
    output = Path(session.create_tmp()) / "readthedocs-output"
    shutil.rmtree(output, ignore_errors=True)
    output.mkdir()
    # Only what the hosting sets: nothing of this shell's settings, database or paths reaches the build.
    env: dict[str, str | None] = {
        "READTHEDOCS": "True",
        "READTHEDOCS_OUTPUT": str(output),
        "READTHEDOCS_VIRTUALENV_PATH": session.virtualenv.location,
        "DATABASE_URL": None,
        "DJANGO_SETTINGS_MODULE": None,
        "PYTHONPATH": None,
        "PIP_REQUIRE_VIRTUALENV": None,
    }
    session.run(
        "bash",
        "-c",
        'test "$(command -v python)" = "$READTHEDOCS_VIRTUALENV_PATH/bin/python"',
        env=env,
        external=True,
    )
    for line in jobs["install"]:
        session.run("bash", "-euo", "pipefail", "-c", line, env=env, external=True)
    for lines in jobs["build"].values():
        for line in lines:
            session.run("bash", "-euo", "pipefail", "-c", line, env=env, external=True)
    if not (output / "html" / "index.html").is_file():
        session.error(f"the build wrote no {output / 'html' / 'index.html'}")


UNWANTED = {"psycopg-binary", "psycopg-c", "psycopg-pool", "orjson", "pgmq"}
"""What ``pip install pgflow-django`` must not bring: a psycopg build is the installer's choice."""


@nox.session(name="wheel_smoke", reuse_venv=False)
def wheel_smoke(session: nox.Session) -> None:
    """The built wheel (``make dist``) in a clean venv: startproject, migrate, one flow run, and
    ``manage.py test`` twice (each must drop its test database)."""
    wheels = sorted(glob.glob(str(ROOT / "dist" / "*.whl")))
    if len(wheels) != 1:
        session.error(f"expected one wheel in dist/ (run make dist), found {len(wheels)}")
    url = os.environ.get("DATABASE_URL")
    if not url:
        session.error("wheel_smoke needs DATABASE_URL: a PostgreSQL server on which it may create a database")
    # A plain install brings no psycopg build and nothing PGMQ's Python client needs; [binary] adds the build.
    session.install(wheels[0])
    dragged = sorted(set(installed(session)) & UNWANTED)
    if dragged:
        session.error(f"pip install of the wheel (no extras) brought {', '.join(dragged)}")
    session.install(f"{wheels[0]}[binary]")
    if "psycopg-binary" not in installed(session):
        session.error("pip install of the wheel with [binary] brought no psycopg-binary")
    session.log(
        "wheel: no extras brings none of " + ", ".join(sorted(UNWANTED)) + "; [binary] brings psycopg-binary"
    )
    session.run("python", str(ROOT / ".ci" / "wheel_smoke.py"), url, external=False)
