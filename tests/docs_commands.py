"""Command lines shown in the documentation, checked against the real commands: each ``manage.py``
line of a page's shell blocks parses with that command's own argument parser."""

from __future__ import annotations

import argparse
import re
import shlex
from pathlib import Path

from django.core.management import get_commands, load_command_class

DOCS = Path(__file__).resolve().parent.parent / "docs"


def blocks(page: str, *languages: str) -> list[str]:
    """The code blocks of ``docs/<page>`` in any of ``languages``, in page order."""
    text = (DOCS / page).read_text(encoding="utf-8")
    return re.findall(rf"```(?:{'|'.join(languages)})\n(.*?)```", text, re.DOTALL)


def manage_py_lines(block: str) -> list[list[str]]:
    """The ``manage.py`` command lines of a shell block, as words from ``manage.py`` on (a prompt,
    ``python`` or an interpreter path before it, and a trailing ``#`` comment, are left out)."""
    found = []
    for line in block.splitlines():
        words = shlex.split(line, comments=True)
        if "manage.py" in words:
            found.append(words[words.index("manage.py") :])
    return found


def parse(words: list[str]) -> tuple[str, argparse.Namespace]:
    """``["manage.py", name, *args]`` parsed by the command's own parser: (name, options)."""
    assert words[0] == "manage.py", words
    name = words[1]
    command = load_command_class(get_commands()[name], name)
    return name, command.create_parser("manage.py", name).parse_args(words[2:])
