"""The settings' defaults are one table (``conf.SETTINGS``): the settings object, the worker options
(for the settings that are a worker option), the ``pgflow_worker`` flags and docs/settings.md all
agree with it."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from django.core.management import load_command_class
from django.test import override_settings

from pgflow_django.conf import DEFAULTS, SETTINGS, PgflowSettings, get_settings
from pgflow_django.worker.options import WorkerOptions

DOC = Path(__file__).resolve().parents[2] / "docs" / "settings.md"


def test_settings_and_worker_options_take_their_defaults_from_the_table() -> None:
    with override_settings(PGFLOW={}):
        settings = get_settings()
    option_fields = {field.name: field.default for field in dataclasses.fields(WorkerOptions)}
    assert {field.name for field in dataclasses.fields(PgflowSettings)} >= {s.attribute for s in SETTINGS}
    for setting in SETTINGS:
        assert DEFAULTS[setting.key] == setting.default
        assert getattr(settings, setting.attribute) == setting.default, setting.key
        if setting.option is not None:
            assert option_fields[setting.option] == setting.default, setting.key
    assert {s.key for s in SETTINGS if s.option is None} == {
        "ADMIN_DATABASE",
        "EVENT_RETENTION_SECONDS",
    }, "not a worker option"


def test_worker_options_no_longer_carry_a_flow_slug() -> None:
    assert "flow_slug" not in {field.name for field in dataclasses.fields(WorkerOptions)}


def test_pgflow_worker_flags_default_to_the_setting() -> None:
    """A flag left out is None, so ``WorkerOptions.from_settings`` fills it from the table."""
    command = load_command_class("pgflow_django", "pgflow_worker")
    parser = command.create_parser("manage.py", "pgflow_worker")
    defaults = vars(parser.parse_args(["--flow", "f"]))
    for setting in SETTINGS:
        if setting.option in defaults:
            assert defaults[setting.option] is None, setting.option


def test_docs_list_each_default() -> None:
    text = DOC.read_text(encoding="utf-8")
    for setting in SETTINGS:
        match = re.search(rf"^\| `{setting.key}` \| `([^`]*)` \|", text, re.MULTILINE)
        assert match is not None, setting.key
        assert match.group(1) == repr(setting.default), setting.key
