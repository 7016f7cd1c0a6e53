"""Each package keeps the statements it sends in its own ``queries`` module, on the one core of
``pgflow_django.db.query``: no other module passes statement text to a cursor, every statement reads
its rows into a named row type, a statement stays shared (``pgflow_django.db.queries``) only while two
or more packages send it, and the core knows no domain type."""

from __future__ import annotations

import ast
from importlib import import_module
from pathlib import Path

from pgflow_django.db import query as core
from pgflow_django.db.query import Query
from pgflow_django.worker import queries as worker_queries

PACKAGE = Path(core.__file__).resolve().parent.parent
MIGRATION_TIME = {
    "db/catalog.py",  # catalog snapshots compared by the migration tests
    "db/pgmq_install.py",  # installs PGMQ from a migration
}
"""Modules that may hold statement text besides the queries modules: migration-time SQL."""
CHECKS_STATEMENTS = {"HAS_PGMQ_SCHEMA", "PGMQ_VERSIONS"}
"""Statements of ``db.queries`` that only ``checks.py`` sends: a top-level module has no queries
module of its own, and these are the database checks'."""


def _queries_modules() -> dict[str, Path]:
    """``package -> path`` of every ``<package>/queries.py``."""
    return {path.parent.name: path for path in sorted(PACKAGE.glob("*/queries.py"))}


def _statement_text(node: ast.expr) -> bool:
    """A literal string, an f-string, or psycopg's ``sql.SQL("...")`` built in place."""
    if (isinstance(node, ast.Constant) and isinstance(node.value, str)) or isinstance(node, ast.JoinedStr):
        return True
    if isinstance(node, ast.Call):
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr == "format":
            return _statement_text(func.value)
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        return name == "SQL" and bool(node.args) and _statement_text(node.args[0])
    return False


def _sql_outside_home() -> list[str]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE)
        if (
            path.name == "queries.py"
            or str(relative) in MIGRATION_TIME
            or relative.parts[0] in {"migrations", "sql"}
        ):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "execute"
                and node.args
                and _statement_text(node.args[0])
            ):
                found.append(f"{relative}:{node.lineno}")
    return found


def _statements() -> dict[str, dict[str, Query[object]]]:
    """``package -> {constant name: Query}`` of every queries module."""
    found: dict[str, dict[str, Query[object]]] = {}
    for package in _queries_modules():
        module = import_module(f"pgflow_django.{package}.queries")
        found[package] = {name: value for name, value in vars(module).items() if isinstance(value, Query)}
    return found


def _names_sent(tree: ast.Module) -> set[str]:
    """The statement names a module takes from a queries module: imported from one, or read as an
    attribute of a name bound to one (``queries.X``, ``db_queries.X``)."""
    sent: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").endswith(".queries"):
            sent.update(alias.name for alias in node.names)
        elif (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id.endswith("queries")
        ):
            sent.add(node.attr)
    return sent


def _senders_by_name() -> dict[str, set[str]]:
    """Statement name -> the top-level packages (or modules) of pgflow_django whose code sends it."""
    senders: dict[str, set[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        relative = path.relative_to(PACKAGE)
        if path.name == "queries.py" or relative.parts[0] in {"migrations", "sql"}:
            continue
        for name in _names_sent(ast.parse(path.read_text(encoding="utf-8"))):
            senders.setdefault(name, set()).add(relative.parts[0].removesuffix(".py"))
    shared = ast.parse((PACKAGE / "db" / "queries.py").read_text(encoding="utf-8"))
    for helper in shared.body:  # a statement a shared helper sends has the helper's senders
        if isinstance(helper, ast.FunctionDef):
            for name in {node.id for node in ast.walk(helper) if isinstance(node, ast.Name)}:
                senders.setdefault(name, set()).update(senders.get(helper.name, set()))
    return senders


def test_no_module_outside_a_queries_module_sends_statement_text() -> None:
    assert _sql_outside_home() == []


def test_each_query_has_a_unique_name_and_a_row_type() -> None:
    named = [query for statements in _statements().values() for query in statements.values()]
    assert len(named) > 100
    names = [query.name for query in named]
    assert len(names) == len(set(names))
    assert all(callable(query.row) for query in named)


def test_a_statement_lives_with_the_one_package_that_sends_it() -> None:
    statements, senders = _statements(), _senders_by_name()
    misplaced = {
        f"{package}.{name}": sorted(senders.get(name, set()))
        for package, named in statements.items()
        if package != "db"
        for name in named
        if senders.get(name, set()) - {package}
    }
    assert misplaced == {}
    single = {
        name: sorted(senders.get(name, set()))
        for name in statements["db"]
        if len(senders.get(name, set()) - {"db"}) < 2
        and not senders.get(name, set()) <= {"db"}
        and name not in CHECKS_STATEMENTS
    }
    assert single == {}, "a statement of db/queries.py that one package sends belongs in its queries.py"


def test_statements_are_defined_only_in_queries_modules() -> None:
    makers = {"Query", "value_query"}
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE)
        if path.name == "queries.py" or str(relative) == "db/query.py" or relative.parts[0] == "migrations":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Call)
                and getattr(node.func, "id", getattr(node.func, "attr", "")) in makers
            ):
                found.append(f"{relative}:{node.lineno}")
    assert found == []


def test_the_statement_core_knows_no_domain_type() -> None:
    tree = ast.parse(Path(core.__file__).read_text(encoding="utf-8"))
    imported = [node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)] + [
        alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names
    ]
    assert not [name for name in imported if name.startswith("pgflow_django")]


def test_the_shared_claim_differs_from_the_plain_one_only_in_its_start_function_and_version_filter() -> None:
    pairs = [
        (worker_queries.CLAIM, worker_queries.CLAIM_SHARED),
        (worker_queries.CLAIM_TRACED, worker_queries.CLAIM_SHARED_TRACED),
    ]
    for plain_query, shared_query in pairs:
        plain, shared = str(plain_query.text), str(shared_query.text)
        assert "pgflow.start_tasks(" in plain and "pgflow.start_shared_tasks(" not in plain
        assert "pgflow.start_shared_tasks(" in shared and "pgflow.start_tasks(" not in shared
        assert "%(families)s" in shared and "%(families)s" not in plain
        without_filter = shared.replace(worker_queries._read(True), worker_queries._read(False))
        assert plain.split("left join lateral")[0] == without_filter.split("left join lateral")[0]
