"""Hostile identifiers of the reliability suite (issue 8, item 3), shared by the DSL, SQL and command
tests: SQL injection attempts, quotes, ``$``, ``--``, spaces, unicode and overlong names. None of them is
a valid slug or queue name; every one must be refused with no side effect, and in particular
``public.pwned`` must never exist."""

from __future__ import annotations

from typing import Any

PWNED = "public.pwned"

HOSTILE: tuple[str, ...] = (
    "x; create table public.pwned(i int)",
    "x'); create table public.pwned(i int); --",
    'x"; create table public.pwned(i int); --',
    "x$$; create table public.pwned(i int); $$",
    "x$1",
    "x -- comment",
    "with space",
    "o'brien",
    'dq"uote',
    "back\\slash",
    "dollar$sign",
    "semi;colon",
    "tab\tname",
    "new\nline",
    "ünïcödé",
    "名前",
    "emoji_🙂",
    "\u212a",  # Kelvin sign: lower() folds it to ASCII 'k'
    "x" * 200,
    "",
)


def ids(values: tuple[str, ...] = HOSTILE) -> list[str]:
    """Readable pytest ids for hostile values."""
    return [repr(value)[:40] for value in values]


def pwned_exists(cursor: Any) -> bool:
    cursor.execute("select to_regclass(%s) is not null", [PWNED])
    row = cursor.fetchone()
    return bool(row[0])
