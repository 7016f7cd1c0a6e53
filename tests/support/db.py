"""Run SQL from a test and read what comes back: the suite's one set of query helpers.

Each helper runs on Django's default connection unless ``on`` names something else: a DB-API cursor
(Django's or psycopg's) or a psycopg connection. jsonb values arrive decoded whatever the connection
(Django's psycopg setup leaves them as text; plain psycopg decodes them itself).
"""

from __future__ import annotations

import json
from typing import Any

from django.db import DatabaseError, connection, transaction

JSONB_OID = 3802


def _fetch(query: str, params: Any, on: Any) -> tuple[list[str], list[tuple[Any, ...]]]:
    if on is None:
        with connection.cursor() as cursor:
            return _fetch(query, params, cursor)
    if not hasattr(on, "fetchall"):
        with on.cursor() as cursor:
            return _fetch(query, params, cursor)
    on.execute(query, params)
    if on.description is None:
        return [], []
    decode = [column.type_code == JSONB_OID for column in on.description]
    found = [
        tuple(
            json.loads(value) if is_json and isinstance(value, str) else value
            for is_json, value in zip(decode, row, strict=True)
        )
        for row in on.fetchall()
    ]
    return [column.name for column in on.description], found


def tuples(query: str, params: Any = None, *, on: Any = None) -> list[tuple[Any, ...]]:
    """Every row as a tuple; no rows (or a statement without a result) gives ``[]``."""
    return _fetch(query, params, on)[1]


def rows(query: str, params: Any = None, *, on: Any = None) -> list[dict[str, Any]]:
    """Every row as a dict by column name."""
    names, found = _fetch(query, params, on)
    return [dict(zip(names, row, strict=True)) for row in found]


def one(query: str, params: Any = None, *, on: Any = None) -> dict[str, Any]:
    """The one row the query must return."""
    found = rows(query, params, on=on)
    assert len(found) == 1, f"expected one row, got {len(found)}: {found}"
    return found[0]


def value(query: str, params: Any = None, *, on: Any = None) -> Any:
    """The first column of the one row the query must return."""
    found = tuples(query, params, on=on)
    assert len(found) == 1, f"expected one row, got {len(found)}: {found}"
    return found[0][0]


def scalar(query: str, params: Any = None, *, on: Any = None) -> Any:
    """The first column of the first row, or None when there is no row."""
    found = tuples(query, params, on=on)
    return found[0][0] if found else None


def execute(query: str, params: Any = None, *, on: Any = None) -> None:
    _fetch(query, params, on)


def jsonb(data: Any) -> str:
    """A Python value as a jsonb parameter (use with ``%s::jsonb``)."""
    return json.dumps(data)


def db_error(query: str, params: Any = None) -> str:
    """Run a statement that must fail on Django's connection; the test's transaction survives
    (savepoint). Returns the message."""
    import pytest  # worker processes import this module too (through tests.ledger): pytest only here

    with pytest.raises(DatabaseError) as info, transaction.atomic():
        execute(query, params)
    return str(info.value)


def refusal(query: str, params: Any = None) -> tuple[str, str]:
    """Run a statement that must fail on Django's connection; the test's transaction survives
    (savepoint). Returns its SQLSTATE and primary message."""
    import psycopg
    import pytest

    with pytest.raises(DatabaseError) as info, transaction.atomic():
        execute(query, params)
    cause = info.value.__cause__
    assert isinstance(cause, psycopg.Error), cause
    return str(cause.sqlstate), str(cause.diag.message_primary)
