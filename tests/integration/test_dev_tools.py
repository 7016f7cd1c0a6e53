"""The example project's development tools (docs/development.md): django-extensions' ``shell_plus``
with the pgflow models imported, and ``graph_models`` of the pgflow app."""

from __future__ import annotations

from tests.integration.commands_support import manage_in_process
from tests.support.db import value


def test_shell_plus_imports_the_pgflow_models() -> None:
    # the counts the test database holds now (committed by earlier tests on this xdist worker or not)
    runs, flows = value("select count(*) from pgflow.runs"), value("select count(*) from pgflow.flows")
    result = manage_in_process(
        "shell_plus",
        "--command",
        "print('runs', Run.objects.count(), 'flows', Flow.objects.count(), StepTask.__module__)",
        settings={},
    )
    assert result.returncode == 0, result.stderr
    assert f"runs {runs} flows {flows} pgflow_django.models" in result.stdout


def test_graph_models_draws_the_pgflow_app() -> None:
    # graph_models reads the model classes only: no database is opened.
    result = manage_in_process("graph_models", "pgflow", "--dot", settings={})
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("digraph model_graph {")
    for model in ("Flow", "Step", "Run", "StepState", "StepTask", "Worker", "WorkerPause"):
        assert f"pgflow_django_models_{model} [label=" in result.stdout, model
    assert "pgflow_django_models_StepTask -> pgflow_django_models_Run" in result.stdout
