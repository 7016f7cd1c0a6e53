"""Squash a run of frozen migration deltas into one pair:
``python -m pgflow_django.sql.squash 0007 0038 0007_squashed_0038``.

The up delta is the up deltas FIRST..LAST in the order they ran, the down delta their down deltas in the
order a rollback runs them (LAST's first), each without the function definitions a later statement of the
same script supersedes. A ``create [or replace] function`` is superseded when the same function (name and
parameter list) is defined again further on and no statement in between, other than a function
definition, names it (as ``pgflow.name`` or ``name(``): a drop, an ``alter function``, a trigger or a data
statement that calls it keeps
the earlier definition, so every statement still runs against the function it ran against before. Table
changes, data backfills and every other statement are kept, in order. The result therefore leaves the
same catalog as the chain it replaces (the drift test and the migration hygiene test check it), with each
function written once.

Statements are split on top-level semicolons, outside comments, quoted strings, quoted identifiers and
dollar quotes. The squashed files are written beside the deltas; the Django migration that loads them,
with ``replaces`` for the migrations of the squashed deltas, is written by hand (docs/development.md).
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from pgflow_django.sql import MIGRATIONS_DIR

NAME_PATTERN = re.compile(r"^[0-9]{4}_[a-z0-9_]+$")
_DOLLAR = re.compile(r"\$([A-Za-z_][A-Za-z_0-9]*)?\$")
_DEFINITION = re.compile(
    r"^create\s+(?:or\s+replace\s+)?function\s+((?:\"?[a-z_][a-z0-9_]*\"?\.)?\"?[a-z_][a-z0-9_]*\"?)\s*\(",
    re.IGNORECASE,
)


class SquashError(Exception):
    """The squash cannot be written; the message says why."""


@dataclass(frozen=True)
class Statement:
    text: str
    """The statement with the comments and blank lines before it, up to and including its semicolon."""
    code: str
    """The statement alone, without the comments before it."""


def split_statements(script: str) -> list[Statement]:
    """The top-level statements of ``script``; text after the last semicolon must be comments only."""
    statements: list[Statement] = []
    start = i = 0
    n = len(script)
    while i < n:
        char = script[i]
        if script.startswith("--", i):
            end = script.find("\n", i)
            i = n if end < 0 else end + 1
        elif script.startswith("/*", i):
            end = script.find("*/", i + 2)
            if end < 0:
                raise SquashError("unterminated /* comment")
            i = end + 2
        elif char == "'":
            i = _skip_string(script, i)
        elif char == '"':
            end = script.find('"', i + 1)
            if end < 0:
                raise SquashError("unterminated quoted identifier")
            i = end + 1
        elif char == "$" and (found := _DOLLAR.match(script, i)) and not _word_char(script, i - 1):
            tag = found.group(0)
            end = script.find(tag, i + len(tag))
            if end < 0:
                raise SquashError(f"unterminated dollar quote {tag}")
            i = end + len(tag)
        elif char == ";":
            text = script[start : i + 1]
            statements.append(Statement(text=text, code=_strip_comments(text)))
            start = i = i + 1
        else:
            i += 1
    if _strip_comments(script[start:]):
        raise SquashError(f"text after the last statement: {script[start:].strip()[:80]!r}")
    return statements


def _word_char(script: str, index: int) -> bool:
    return index >= 0 and (script[index].isalnum() or script[index] == "_")


def _skip_string(script: str, i: int) -> int:
    """Index just after the string literal that starts at ``i``."""
    escapes = i > 0 and script[i - 1] in "eE" and not _word_char(script, i - 2)
    i += 1
    while i < len(script):
        if escapes and script[i] == "\\":
            i += 2
            continue
        if script[i] == "'":
            if script.startswith("''", i):
                i += 2
                continue
            return i + 1
        i += 1
    raise SquashError("unterminated string literal")


def _strip_comments(text: str) -> str:
    lines = text.split("\n")
    while lines and (not lines[0].strip() or lines[0].lstrip().startswith("--")):
        lines.pop(0)
    return "\n".join(lines).strip()


def _function(statement: Statement) -> tuple[str, str] | None:
    """(name, parameter list) of a function definition, or None for any other statement."""
    found = _DEFINITION.match(statement.code)
    if not found:
        return None
    name = found.group(1).replace('"', "").lower()
    depth, i = 1, found.end()
    while depth and i < len(statement.code):
        depth += {"(": 1, ")": -1}.get(statement.code[i], 0)
        i += 1
    parameters = " ".join(statement.code[found.end() : i - 1].lower().split())
    return name, parameters


def superseded(statements: Sequence[Statement]) -> set[int]:
    """Indexes of the function definitions a later definition of the same function replaces unseen."""
    functions = [_function(statement) for statement in statements]
    dropped: set[int] = set()
    for index, key in enumerate(functions):
        if key is None:
            continue
        short = re.escape(key[0].rsplit(".", 1)[-1])
        bare = re.compile(rf"\b{short}\s*\(|\b{re.escape(key[0])}\b", re.IGNORECASE)
        for later in range(index + 1, len(statements)):
            if functions[later] == key:
                dropped.add(index)
                break
            if functions[later] is None and bare.search(statements[later].code):
                break
    return dropped


def squash(scripts: Sequence[tuple[str, str]]) -> tuple[str, int, int]:
    """The scripts (file name, text) as one, in order, without superseded function definitions.

    Returns the text, the number of statements kept and the number dropped.
    """
    located: list[tuple[str, Statement]] = []
    for name, text in scripts:
        located.extend((name, statement) for statement in split_statements(text))
    dropped = superseded([statement for _, statement in located])
    parts: list[str] = []
    current = ""
    for index, (name, statement) in enumerate(located):
        if index in dropped:
            continue
        if name != current:
            current = name
            parts.append(f"\n-- ---------------------------------------------------------------- {name}\n")
        parts.append(statement.text.strip("\n") + "\n")
    return "".join(parts), len(located) - len(dropped), len(dropped)


def deltas(first: str, last: str, directory: Path = MIGRATIONS_DIR) -> list[tuple[Path, Path]]:
    """(up, down) delta paths of the migrations numbered ``first`` to ``last``, in order."""
    pairs: list[tuple[Path, Path]] = []
    for up in sorted(directory.glob("[0-9][0-9][0-9][0-9]_*.sql")):
        if up.name.endswith("_down.sql") or not first <= up.name[:4] <= last:
            continue
        down = up.with_name(up.stem + "_down.sql")
        if not down.is_file():
            raise SquashError(f"{up.name} has no down delta {down.name}")
        pairs.append((up, down))
    if not pairs:
        raise SquashError(f"no deltas numbered {first} to {last} in {directory}")
    return pairs


def write(first: str, last: str, name: str, directory: Path = MIGRATIONS_DIR) -> tuple[Path, Path, str]:
    """Write ``<name>.sql`` and ``<name>_down.sql``; returns their paths and a one-line summary."""
    if not NAME_PATTERN.match(name):
        raise SquashError(f"invalid delta name {name!r}: expected NNNN_lowercase_words")
    pairs = deltas(first, last, directory)
    names = ", ".join(up.stem for up, _ in pairs)
    up_text, up_kept, up_dropped = squash([(up.name, up.read_text(encoding="utf-8")) for up, _ in pairs])
    down_text, down_kept, down_dropped = squash(
        [(down.name, down.read_text(encoding="utf-8")) for _, down in reversed(pairs)]
    )
    command = f"`python -m pgflow_django.sql.squash {first} {last} {name}`"
    intro = (
        f"-- {name}: the deltas {pairs[0][0].stem} to {pairs[-1][0].stem} as one, written by\n"
        f"-- {command}: their statements in the order they ran,\n"
        "-- without the function definitions a later one replaced unseen. Never edit it once released.\n"
        f"-- Squashed: {names}.\n"
    )
    up_path = directory / f"{name}.sql"
    down_path = directory / f"{name}_down.sql"
    up_path.write_text(intro + up_text, encoding="utf-8")
    down_path.write_text(
        intro.replace("in the order they ran", "in the order a rollback runs them") + down_text,
        encoding="utf-8",
    )
    summary = (
        f"up: {up_kept} statements kept, {up_dropped} superseded definitions dropped; "
        f"down: {down_kept} kept, {down_dropped} dropped"
    )
    return up_path, down_path, summary


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m pgflow_django.sql.squash",
        description="Squash the frozen deltas FIRST..LAST (and their down deltas) into one pair.",
    )
    parser.add_argument("first", help="number of the first delta, e.g. 0007")
    parser.add_argument("last", help="number of the last delta, e.g. 0038")
    parser.add_argument("name", help="name of the squashed delta, e.g. 0007_squashed_0038")
    args = parser.parse_args(argv)
    try:
        up, down, summary = write(args.first, args.last, args.name)
    except SquashError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"wrote {up} and {down}: {summary}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
