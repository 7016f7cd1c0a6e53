"""A task module that raises at import is one system check error naming it, not a traceback: the
schedule checks import every task module (their schedules are declared there)."""

from __future__ import annotations

from tests.first_hour import manage


def test_a_task_module_that_raises_at_import_is_one_check_error() -> None:
    result = manage("check", env={"DJANGO_SETTINGS_MODULE": "tests.broken_tasks_settings"})
    assert result.returncode == 1, result.stdout + result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    assert (
        "(pgflow.E034) task module 'tests.broken_tasks' cannot be imported: RuntimeError: the payments "
        "client needs PAYMENTS_URL; its tasks and their schedules are unknown"
    ) in result.stderr
    assert "python -c 'import tests.broken_tasks'" in result.stderr


def test_the_same_settings_without_the_broken_module_pass() -> None:
    result = manage("check", env={"DJANGO_SETTINGS_MODULE": "tests.tasks_settings"})
    assert result.returncode == 0, result.stdout + result.stderr
    assert "pgflow.E034" not in result.stderr
