"""docs/sql-api.md documents exactly the functions of schema ``pgflow``: each function has one table
row whose first cell is its signature, with the catalog's argument names and types in order (the
numbered functions ``queue_access_000`` to ``_255`` that pgflow.write_queue_access() generates beyond
32 queues share one row, ``queue_access_NNN``, which this check does not read).

A function added, dropped or re-signed without its row (or the reverse) fails here, so the document
cannot keep describing what the database no longer has.
"""

from __future__ import annotations

import re
from pathlib import Path

from tests.sql.support import q

DOC = Path(__file__).resolve().parents[3] / "docs" / "sql-api.md"

_ROW = re.compile(r"^\| `([a-z_0-9]+)\(([^`]*)\)` \|", re.MULTILINE)
_TYPES = {"int": "integer", "int[]": "integer[]", "bool": "boolean"}


def _normalized(arguments: str) -> tuple[str, ...]:
    """``name type`` of each input argument, defaults dropped and type spellings made canonical."""
    found: list[str] = []
    for argument in filter(None, (part.strip() for part in arguments.split(","))):
        if argument.startswith("OUT "):
            continue
        declared = re.split(r"\s+(?:=|DEFAULT)\s+", argument, maxsplit=1)[0].split()
        name, kind = declared[0], " ".join(declared[1:])
        found.append(f"{name} {_TYPES.get(kind, kind)}")
    return tuple(found)


def documented(text: str) -> list[tuple[str, tuple[str, ...]]]:
    return sorted((name, _normalized(arguments)) for name, arguments in _ROW.findall(text))


def catalog() -> list[tuple[str, tuple[str, ...]]]:
    """The functions of schema pgflow, without pgflow.queue_access_000 to _255: pgflow.write_queue_access()
    makes them once pgflow has more than 32 queues, and one row (``queue_access_NNN``) documents them."""
    rows = q(
        "select p.proname as name, pg_get_function_identity_arguments(p.oid) as arguments"
        "  from pg_proc as p where p.pronamespace = 'pgflow'::regnamespace"
        "   and p.proname !~ '^queue_access_[0-9]{3}$'"
    )
    return sorted((row["name"], _normalized(row["arguments"])) for row in rows)


def test_sql_api_doc_lists_every_function_of_the_catalog_and_nothing_else() -> None:
    in_doc = documented(DOC.read_text(encoding="utf-8"))
    in_catalog = catalog()
    assert len(in_catalog) > 30
    assert [entry for entry in in_catalog if entry not in in_doc] == [], "functions without a row in the doc"
    assert [entry for entry in in_doc if entry not in in_catalog] == [], (
        "rows for functions that do not exist"
    )
    assert len(set(in_doc)) == len(in_doc), "a function documented twice"


def test_the_doc_check_sees_a_stale_row() -> None:
    stale = documented(
        DOC.read_text(encoding="utf-8") + "\n| `maybe_complete_run(run_id uuid)` | void | x |\n"
    )
    assert ("maybe_complete_run", ("run_id uuid",)) in stale
    assert ("maybe_complete_run", ("run_id uuid",)) not in catalog()
