"""Squash a run of frozen migration deltas into one pair:
``python -m pgflow_django.sql.squash 0007 0038 0007_squashed_0038``.

The up delta is the up deltas FIRST..LAST in the order they ran, the down delta their down deltas in the
order a rollback runs them (LAST's first), each without the statements a later definition of the same
function makes redundant. A ``create [or replace] function`` is left out when the same function (name
and parameter list) is defined again further on and no statement in between, other than a function
definition, names it (as ``pgflow.name`` or ``name(``), except ``alter function ... set|reset``
statements of that function, which are left out with it (``create or replace`` replaces every setting).
A drop, any other ``alter function``, a trigger or a data statement that calls the function keeps the
earlier definition, so every statement still runs against the function it ran against before. Table
changes, data backfills and every other statement are kept, in order. The result leaves the same catalog
as the chain it replaces (the drift test and the migration hygiene test check it), with most functions
written once.

Statements are split on top-level semicolons, outside comments, quoted strings, quoted identifiers and
dollar quotes. The squashed files are written beside the deltas; the Django migration that loads them,
with ``replaces`` for the migrations of the squashed deltas, is written by hand (docs/development.md).
"""

from __future__ import annotations

import argparse
import re
import sys
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from pgflow_django.sql import MIGRATIONS_DIR

NAME_PATTERN = re.compile(r"^[0-9]{4}_[a-z0-9_]+$")
_DOLLAR = re.compile(r"\$([A-Za-z_][A-Za-z_0-9]*)?\$")
_NAME = r"((?:\"?[a-z_][a-z0-9_]*\"?\.)?\"?[a-z_][a-z0-9_]*\"?)\s*\("
_ALTER = re.compile(r"^alter\s+function\s+" + _NAME, re.IGNORECASE)
_DEFINITION = re.compile(r"^create\s+(?:or\s+replace\s+)?function\s+" + _NAME, re.IGNORECASE)


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


def _call(code: str, pattern: re.Pattern[str]) -> tuple[str, str, str] | None:
    """(name, parameter list, rest) when ``code`` matches ``pattern`` up to an opening parenthesis."""
    found = pattern.match(code)
    if not found:
        return None
    name = found.group(1).replace('"', "").lower()
    depth, i = 1, found.end()
    while depth and i < len(code):
        depth += {"(": 1, ")": -1}.get(code[i], 0)
        i += 1
    return name, " ".join(code[found.end() : i - 1].lower().split()), code[i:]


def _function(statement: Statement) -> tuple[str, str] | None:
    """(name, parameter list) of a function definition, or None for any other statement."""
    call = _call(statement.code, _DEFINITION)
    return None if call is None else call[:2]


_ALIASES = {"int": "integer", "int4": "integer", "int8": "bigint", "bool": "boolean", "int2": "smallint"}
_TYPE_STARTS = {"double", "timestamp", "time", "character", "bit", "interval", "national"}


def _types(parameters: str) -> tuple[str, ...]:
    """The argument types of a parameter list (names, modes and defaults left out)."""
    items: list[str] = []
    depth, start = 0, 0
    for i, char in enumerate(parameters + ","):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            items.append(parameters[start:i])
            start = i + 1
    types: list[str] = []
    for item in items:
        words = re.split(r"\s+default\s+|\s*=\s*", item.strip(), maxsplit=1)[0].split()
        if words and words[0] in {"in", "out", "inout", "variadic"}:
            words = words[1:]
        if len(words) > 1 and words[0] not in _TYPE_STARTS:
            words = words[1:]
        if words:
            types.append(_ALIASES.get(" ".join(words), " ".join(words)))
    return tuple(types)


def _config_change(statement: Statement, key: tuple[str, str]) -> bool:
    """Whether the statement is ``alter function <key> set|reset <setting>``, which a later
    ``create or replace`` of the same function undoes (it replaces every setting)."""
    call = _call(statement.code, _ALTER)
    if call is None or call[0] != key[0] or _types(call[1]) != _types(key[1]):
        return False
    return re.match(r"^\s*(set|reset)\s+(?!schema\b)", call[2], re.IGNORECASE) is not None


def superseded(statements: Sequence[Statement]) -> set[int]:
    """Indexes of the statements a later definition of the same function makes redundant: the earlier
    definitions it replaces unseen, and the ``alter function ... set`` statements in between."""
    functions = [_function(statement) for statement in statements]
    dropped: set[int] = set()
    for index, key in enumerate(functions):
        if key is None:
            continue
        short = re.escape(key[0].rsplit(".", 1)[-1])
        bare = re.compile(rf"\b{short}\s*\(|\b{re.escape(key[0])}\b", re.IGNORECASE)
        settings: list[int] = []
        for later in range(index + 1, len(statements)):
            if functions[later] == key:
                dropped.add(index)
                dropped.update(settings)
                break
            if functions[later] is None and bare.search(statements[later].code):
                if _config_change(statements[later], key):
                    settings.append(later)
                    continue
                break
    return dropped


def squash(scripts: Sequence[tuple[str, str]]) -> tuple[str, int, int]:
    """The scripts (file name, text) as one, in order, without superseded function definitions.

    Returns the text, the number of statements kept and the number left out.
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
    listed = textwrap.wrap(f"Squashed: {names}.", width=100, break_on_hyphens=False)
    intro = (
        f"-- {name}: the deltas {pairs[0][0].stem} to {pairs[-1][0].stem} as one, written by\n"
        f"-- {command}: their statements in the order they ran,\n"
        "-- without those a later definition of the same function made redundant. Never edit it once\n"
        "-- released.\n" + "".join(f"-- {line}\n" for line in listed)
    )
    up_path = directory / f"{name}.sql"
    down_path = directory / f"{name}_down.sql"
    up_path.write_text(intro + up_text, encoding="utf-8")
    down_path.write_text(
        intro.replace("in the order they ran", "in the order a rollback runs them") + down_text,
        encoding="utf-8",
    )
    summary = (
        f"up: {up_kept} statements kept, {up_dropped} superseded ones left out; "
        f"down: {down_kept} kept, {down_dropped} left out"
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
