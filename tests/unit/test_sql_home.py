"""The SQL the Python side sends lives in ``pgflow_django.queries``: no other module passes statement
text to a cursor, and every statement there reads its rows into a named row type."""

from __future__ import annotations

import ast
from pathlib import Path

from pgflow_django import queries

PACKAGE = Path(queries.__file__).resolve().parent
MIGRATION_TIME = {
    "queries.py",
    "catalog.py",  # catalog snapshots compared by the migration tests
    "pgmq_install.py",  # installs PGMQ from a migration
}
"""Modules that may hold statement text: the home itself and migration-time SQL."""


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
        if str(relative) in MIGRATION_TIME or relative.parts[0] in {"migrations", "sql"}:
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


def test_no_module_outside_queries_sends_statement_text() -> None:
    assert _sql_outside_home() == []


def test_each_query_has_a_unique_name_and_a_row_type() -> None:
    named = [value for value in vars(queries).values() if isinstance(value, queries.Query)]
    assert len(named) > 40
    names = [query.name for query in named]
    assert len(names) == len(set(names))
    assert all(callable(query.row) for query in named)


def test_the_shared_claim_differs_from_the_plain_one_only_in_its_start_function() -> None:
    plain, shared = str(queries.CLAIM.text), str(queries.CLAIM_SHARED.text)
    assert "pgflow.start_tasks(" in plain and "pgflow.start_shared_tasks(" not in plain
    assert "pgflow.start_shared_tasks(" in shared and "pgflow.start_tasks(" not in shared
    assert plain.split("left join lateral")[0] == shared.split("left join lateral")[0]
