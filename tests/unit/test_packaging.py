"""What the package says about itself matches what is tested: the classifiers, the README's support
table and the nox sessions name the same Python and Django versions; the version lives in one place;
the changelog keeps its form; the bundled PGMQ installs are PGMQ's own files, unchanged."""

from __future__ import annotations

import ast
import hashlib
import importlib.metadata
import re
import tomllib
from pathlib import Path

import yaml
from packaging.requirements import Requirement
from packaging.version import Version
from trove_classifiers import classifiers as known_classifiers

from pgflow_django.db.pgmq_install import (
    BUNDLED_PGMQ_VERSION,
    MIN_PGMQ_VERSION,
    bundled_sql,
    bundled_versions,
)

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
PROJECT = PYPROJECT["project"]

# The SQL-only PGMQ installs bundled in pgflow_django/sql/pgmq/ (tests/migration/test_upgrade_pgmq_versions.py
# installs each): the SHA-256 of pgmq/sql/pgmq.sql in the pgmq PyPI release that published it (1.11.1 in
# pgmq 1.1.3, 1.13.0 in pgmq 1.1.4), so a bundled file is PGMQ's, byte for byte.
BUNDLED_PGMQ_SHA256 = {
    "1.11.1": "71cf82eaf1d81394a99f56ddf184c3dc8bf5eeb6f204ef9bad6e146e141eca2e",
    "1.13.0": "bf7e66c75ed771df0c5f7cb2b9f0123ca77992daacd56e3911d1894a3efa99de",
}


def nox_combinations() -> list[tuple[str, str, str, tuple[str, ...]]]:
    tree = ast.parse((ROOT / "noxfile.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.AnnAssign) and getattr(node.target, "id", None) == "COMBINATIONS":
            assert node.value is not None
            rows = []
            for element in node.value.elts:  # type: ignore[attr-defined]
                python, django, postgresql, suites = element.elts
                full = isinstance(suites, ast.Tuple)
                rows.append((python.value, django.value, postgresql.value, ("full",) if full else ()))
            return rows
    raise AssertionError("noxfile.py has no COMBINATIONS")


def readme_table() -> list[tuple[str, str, str, str]]:
    text = (ROOT / "README.md").read_text()
    section = text.split("<!-- --8<-- [start:support] -->")[1].split("<!-- --8<-- [end:support] -->")[0]
    return [
        (match[1], match[2], match[3], match[4])
        for match in re.finditer(r"^\| (3\.\d+) \| (\d\.\d) \| (\d+) \| ([a-z +A-Z]+) \|$", section, re.M)
    ]


def classifiers(prefix: str) -> set[str]:
    return {
        c.removeprefix(prefix)
        for c in PROJECT["classifiers"]
        if re.fullmatch(re.escape(prefix) + r"\d+\.\d+", c)
    }


def test_readme_table_lists_exactly_the_nox_sessions() -> None:
    table = [
        (python, django, pg, "whole suite" if suites else "unit + SQL")
        for python, django, pg, suites in nox_combinations()
    ]
    assert readme_table() == table


def test_classifiers_name_every_tested_python_and_django() -> None:
    rows = nox_combinations()
    assert classifiers("Programming Language :: Python :: ") == {row[0] for row in rows}
    assert classifiers("Framework :: Django :: ") == {row[1] for row in rows}
    lowest = min(Version(row[0]) for row in rows)
    assert PROJECT["requires-python"] == f">={lowest}"


def test_every_classifier_is_one_pypi_accepts() -> None:
    assert [c for c in PROJECT["classifiers"] if c not in known_classifiers] == []


def test_the_version_lives_in_pyproject_only() -> None:
    assert "version" not in PROJECT.get("dynamic", [])
    assert importlib.metadata.version("pgflow-django") == PROJECT["version"]
    version = re.escape(PROJECT["version"])
    for path in (ROOT / "pgflow_django").rglob("*.py"):
        assert not re.search(rf"__version__|['\"]{version}['\"]", path.read_text()), path


def test_the_changelog_opens_with_unreleased_and_dates_its_releases() -> None:
    headings = re.findall(r"^## (.+)$", (ROOT / "CHANGELOG.md").read_text(), re.M)
    assert headings[0] == "Unreleased"
    for heading in headings[1:]:
        assert re.fullmatch(r"\[\d+\.\d+\.\d+\] - \d{4}-\d{2}-\d{2}", heading), heading


def test_the_bundled_pgmq_installs_are_pgmqs_own_files_with_its_licence() -> None:
    assert bundled_versions() == sorted(BUNDLED_PGMQ_SHA256, key=Version)
    assert max(BUNDLED_PGMQ_SHA256, key=Version) == BUNDLED_PGMQ_VERSION
    assert min(BUNDLED_PGMQ_SHA256, key=Version).startswith(MIN_PGMQ_VERSION + ".")
    folder = ROOT / "pgflow_django" / "sql" / "pgmq"
    for version, digest in BUNDLED_PGMQ_SHA256.items():
        raw = (folder / version / "pgmq.sql").read_bytes()
        assert hashlib.sha256(raw).hexdigest() == digest, version
        assert bundled_sql(version) == raw.decode("utf-8")
    licence = (folder / "LICENSE").read_text()
    assert licence.startswith("The PostgreSQL License")


def test_a_library_declares_ranges_and_leaves_the_psycopg_build_to_the_installer() -> None:
    """No dependency brings a psycopg build (pgmq, the PGMQ client, required psycopg[binary,pool]: its SQL
    ships in the package instead); the binary extra has psycopg's floor; every floor is a tested one
    (the floors nox session installs each)."""
    dependencies = {Requirement(text).name: Requirement(text) for text in PROJECT["dependencies"]}
    psycopg = dependencies["psycopg"]
    assert psycopg.extras == set()
    assert "pgmq" not in dependencies
    (binary,) = PROJECT["optional-dependencies"]["binary"]
    assert binary == f"psycopg[binary]{psycopg.specifier}"
    for requirement in dependencies.values():
        assert [spec.operator for spec in requirement.specifier if spec.operator != "<"] == [">="], (
            requirement
        )
    assert "dev" not in PROJECT["optional-dependencies"]


def test_the_hosted_docs_build_like_make_docs() -> None:
    config = yaml.safe_load((ROOT / ".readthedocs.yaml").read_text())
    python = config["build"]["tools"]["python"]
    assert python in {row[0] for row in nox_combinations()}, (
        f"docs build on Python {python}, which is not tested"
    )
    install = " ".join(config["build"]["jobs"]["install"])
    group = re.search(r"--group (\w+)", install)
    assert group and group[1] in PYPROJECT["dependency-groups"]
    (html,) = config["build"]["jobs"]["build"]["html"]
    assert "mkdocs build --strict" in html
    assert "mkdocs build --strict" in (ROOT / "Makefile").read_text()
    assert PROJECT["urls"]["Documentation"].startswith("https://pgflow-django.readthedocs.io/")
