"""MkDocs hooks of the documentation site (``mkdocs.yml``: ``hooks``).

- ``reference/command-help.md`` is generated at build time from each management command's own
  ``--help``, so the reference cannot drift from the commands.
- A page in ``docs/`` that the nav does not list is added under "Guides" rather than left out.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parent
HELP_PAGE = "reference/command-help.md"
HELP_WIDTH = "100"


def _listed(nav: Any) -> set[str]:
    if isinstance(nav, str):
        return {nav}
    if isinstance(nav, list):
        return set().union(*(_listed(item) for item in nav)) if nav else set()
    if isinstance(nav, dict):
        return set().union(*(_listed(value) for value in nav.values())) if nav else set()
    return set()


def on_config(config: MkDocsConfig) -> MkDocsConfig:
    nav = config.nav or []
    listed = _listed(nav)
    docs = Path(config.docs_dir)
    missing = sorted(
        path.relative_to(docs).as_posix()
        for path in docs.rglob("*.md")
        if path.relative_to(docs).as_posix() not in listed
    )
    for section in nav:
        if isinstance(section, dict) and "Guides" in section:
            section["Guides"].extend(missing)
            break
    return config


def _commands() -> list[tuple[str, str]]:
    """(name, --help text) of every command the installed app ships, in name order."""
    sys.path.insert(0, str(ROOT))
    # --help needs the settings but no database: never start the embedded server for it.
    os.environ.setdefault("DATABASE_URL", "postgresql://localhost/unused")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testproject.settings")
    os.environ["COLUMNS"] = HELP_WIDTH
    import django
    from django.core.management import get_commands, load_command_class

    django.setup()
    names = sorted(name for name, app in get_commands().items() if app == "pgflow_django")
    return [
        (name, load_command_class("pgflow_django", name).create_parser("manage.py", name).format_help())
        for name in names
    ]


def command_help_page() -> str:
    lines = [
        "# Command --help",
        "",
        "The `--help` of every management command pgflow-django installs, as `manage.py <command>",
        "--help` prints it (generated when this site is built). [Management commands](../commands.md)",
        "explains them with examples.",
        "",
    ]
    for name, text in _commands():
        lines += [f"## {name}", "", "```text", text.rstrip(), "```", ""]
    return "\n".join(lines)


def on_files(files: Files, config: MkDocsConfig) -> Files:
    files.append(File.generated(config, HELP_PAGE, content=command_help_page()))
    return files
