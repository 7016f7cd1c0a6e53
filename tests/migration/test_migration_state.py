"""The migrations record every read-only model, so ``makemigrations`` stays quiet for a project that
installs this app (a model added without its ``CreateModel`` would make it write a migration)."""

from __future__ import annotations

from io import StringIO

from django.core.management import call_command


def test_makemigrations_finds_nothing_to_write() -> None:
    out = StringIO()
    call_command("makemigrations", "pgflow", "--check", "--dry-run", stdout=out)
    assert "No changes detected" in out.getvalue()
