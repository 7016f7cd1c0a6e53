"""Freeze the current schema files into one migration delta: ``python -m pgflow_django.sql.freeze 0002_core``.

A frozen delta is what a Django migration runs; once released it is never edited, so overwriting an
existing file needs ``--force`` (meant only for a delta that has not shipped yet).
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from pathlib import Path

from pgflow_django.sql import MIGRATIONS_DIR, SCHEMA_DIR, schema_files

NAME_PATTERN = re.compile(r"^[0-9]{4}_[a-z0-9_]+$")


class FreezeError(Exception):
    """The delta cannot be written; the message says why."""


def frozen_sql(name: str) -> str:
    """The concatenated schema files, each under a comment naming its source file."""
    header = (
        f"-- {name}.sql: the schema files of pgflow_django/sql/schema, frozen by\n"
        f"-- `python -m pgflow_django.sql.freeze {name}`. Loaded by exactly one Django migration;\n"
        "-- never edit it once released.\n"
    )
    parts = [f"\n-- {path.name}\n{path.read_text(encoding='utf-8').rstrip()}\n" for path in schema_files()]
    if not parts:
        raise FreezeError(f"no schema files in {SCHEMA_DIR}")
    return header + "".join(parts)


def freeze(name: str, *, force: bool = False, directory: Path = MIGRATIONS_DIR) -> Path:
    """Write ``<directory>/<name>.sql`` and return its path; refuse to overwrite unless ``force``."""
    name = name.removesuffix(".sql")
    if not NAME_PATTERN.match(name):
        raise FreezeError(f"invalid delta name {name!r}: expected NNNN_lowercase_words, e.g. 0002_core")
    target = directory / f"{name}.sql"
    if target.exists() and not force:
        raise FreezeError(f"{target} exists; a frozen delta is never overwritten (use --force if unreleased)")
    target.write_text(frozen_sql(name), encoding="utf-8")
    return target


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m pgflow_django.sql.freeze",
        description="Write the current schema files as one frozen migration delta.",
    )
    parser.add_argument("name", help="delta name without extension, e.g. 0002_core")
    parser.add_argument("--force", action="store_true", help="overwrite an existing (unreleased) delta")
    args = parser.parse_args(argv)
    try:
        target = freeze(args.name, force=args.force)
    except FreezeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"wrote {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
