"""``python -m pgflow_django.testing.worker_main ALIAS DBNAME ARGS...``: ``pgflow_worker ARGS`` on the
database ``DBNAME`` (the test database) instead of the one the settings name."""

from __future__ import annotations

import sys


def main(argv: list[str]) -> None:
    alias, name, *args = argv
    from django.conf import settings
    from django.core.management import execute_from_command_line

    settings.DATABASES[alias]["NAME"] = name
    execute_from_command_line(["pgflow_worker", "pgflow_worker", *args])


if __name__ == "__main__":
    main(sys.argv[1:])
