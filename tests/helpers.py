"""Small helpers shared by the database tests: run SQL on Django's connection and read rows as dicts."""

from __future__ import annotations

import json
from typing import Any

from django.db import connection


def rows(query: str, params: Any = None) -> list[dict[str, Any]]:
    with connection.cursor() as cursor:
        cursor.execute(query, params)
        if cursor.description is None:
            return []
        names = [col.name for col in cursor.description]
        return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]


def one(query: str, params: Any = None) -> dict[str, Any]:
    result = rows(query, params)
    assert len(result) == 1, f"expected one row, got {len(result)}"
    return result[0]


def scalar(query: str, params: Any = None) -> Any:
    with connection.cursor() as cursor:
        cursor.execute(query, params)
        row = cursor.fetchone()
        return None if row is None else row[0]


def execute(query: str, params: Any = None) -> None:
    with connection.cursor() as cursor:
        cursor.execute(query, params)


def jsonb(value: Any) -> str:
    return json.dumps(value)
