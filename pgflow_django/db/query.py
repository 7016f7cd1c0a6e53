"""The statement core: a named statement (:class:`Query`) and the typed row its result columns are
read into by name (never by position), run through :func:`fetch_all`, :func:`fetch_one` and
:func:`fetch_value` on a Django cursor or a psycopg one alike.

Each package keeps the statements only it sends in its own ``queries`` module (``worker/queries.py``,
``schedules/queries.py``, ...); those two or more packages send live in ``pgflow_django.db.queries``.
This module knows no domain type. Migration-time SQL stays in ``pgflow_django/sql/``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, NamedTuple, TypeVar

from psycopg import sql

R = TypeVar("R")


@dataclass(frozen=True)
class Query(Generic[R]):
    """A named statement and the row type its result columns are read into, by column name."""

    name: str
    text: str | sql.Composed
    """The statement; composed by psycopg where it spans a list of queue tables."""
    row: Callable[..., R]

    def statement(self, **identifiers: str) -> str | sql.Composed:
        """The text, with ``{name}`` placeholders filled with quoted identifiers when it has any."""
        if not identifiers:
            return self.text
        assert isinstance(self.text, str)
        return sql.SQL(self.text).format(**{key: sql.Identifier(value) for key, value in identifiers.items()})


def read_rows(query: Query[R], description: Sequence[Any] | None, rows: Sequence[Sequence[Any]]) -> list[R]:
    """Rows read into ``query.row`` by the names of their columns (``description`` as a DB-API cursor
    gives it), so a column added or moved in the SELECT can never shift the others."""
    if description is None:
        return []
    names = [column[0] for column in description]
    return [query.row(**dict(zip(names, row, strict=True))) for row in rows]


def fetch_all(cursor: Any, query: Query[R], params: Any = None, **identifiers: str) -> list[R]:
    """Run ``query`` on a Django or psycopg cursor; every row, read into its row type."""
    cursor.execute(query.statement(**identifiers), params)
    if cursor.description is None:
        return []
    return read_rows(query, cursor.description, cursor.fetchall())


def fetch_one(cursor: Any, query: Query[R], params: Any = None, **identifiers: str) -> R | None:
    """The first row of ``query`` (None when it returned none)."""
    rows = fetch_all(cursor, query, params, **identifiers)
    return rows[0] if rows else None


class Value(NamedTuple):
    """The one column of a single-value statement (selected ``as value``)."""

    value: Any


def fetch_value(cursor: Any, query: Query[Value], params: Any = None, **identifiers: str) -> Any:
    """The single value of a one-column, one-row statement (None when it returned no row)."""
    row = fetch_one(cursor, query, params, **identifiers)
    return None if row is None else row.value


def value_query(name: str, text: str) -> Query[Value]:
    return Query(name, text, Value)
