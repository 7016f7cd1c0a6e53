"""What the package says about itself matches what is tested: the classifiers, the README's support
table and the nox sessions name the same Python and Django versions; the version lives in one place;
the changelog keeps its form; the bundled PGMQ is one the tests cover."""

from __future__ import annotations

import ast
import importlib.metadata
import re
import tomllib
from pathlib import Path

import yaml
from packaging.version import Version
from trove_classifiers import classifiers as known_classifiers

from pgflow_django.db.pgmq_install import MIN_PGMQ_VERSION, bundled_version

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
PROJECT = PYPROJECT["project"]

# PGMQ releases whose SQL the migration tests install (tests/migration/test_upgrade_pgmq_versions.py):
# a pgmq release in the declared range that bundles another one fails here until it is tested.
TESTED_PGMQ = {"1.11.1", "1.13.0"}


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


def test_the_bundled_pgmq_is_a_tested_release() -> None:
    assert bundled_version() in TESTED_PGMQ
    assert min(TESTED_PGMQ, key=Version).startswith(MIN_PGMQ_VERSION + ".")


def test_a_library_declares_ranges_and_leaves_the_psycopg_build_to_the_installer() -> None:
    dependencies = PROJECT["dependencies"]
    assert "psycopg>=3.2" in dependencies
    assert not any("psycopg[" in dependency for dependency in dependencies)
    assert PROJECT["optional-dependencies"]["binary"] == ["psycopg[binary]>=3.2"]
    assert not any("==" in dependency for dependency in dependencies)
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
