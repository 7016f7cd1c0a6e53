"""``pgflow_django.schedules`` loads its public names on first access: each one resolves to the object
of its module, and importing the worker's side of the package loads none of the definition side."""

from __future__ import annotations

import subprocess
import sys
from importlib import import_module

import pytest

import pgflow_django
from pgflow_django import schedules


@pytest.mark.parametrize("name", schedules.__all__)
def test_each_public_name_resolves_to_its_modules_object(name: str) -> None:
    module = import_module(f"pgflow_django.schedules.{schedules._LAZY[name]}")
    assert getattr(schedules, name) is getattr(module, name)


def test_the_lazy_table_and_all_name_the_same_names() -> None:
    assert schedules.__all__ == sorted(schedules._LAZY)
    assert pgflow_django.schedule is schedules.schedule


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        schedules.nothing  # noqa: B018


def test_the_scheduler_pass_imports_none_of_the_definition_side() -> None:
    loaded = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, pgflow_django.schedules.service; "
            "print(' '.join(sorted(m for m in sys.modules if m.startswith('pgflow_django'))))",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert "pgflow_django.schedules.firing" in loaded
    for module in ("definition", "declare", "store", "sync"):
        assert f"pgflow_django.schedules.{module}" not in loaded
    assert "pgflow_django.tasks" not in loaded
