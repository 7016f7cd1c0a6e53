"""Settings of ``pgflow_worker --tasks`` subprocesses in the tests: the example project's TASKS, plus
``tests.tasks_worker`` in OPTIONS['MODULES'] (its gated task, and receivers that record Django's
task_started and task_finished signals in the ledger)."""

from testproject.settings import *  # noqa: F403
from testproject.settings import TASKS as _EXAMPLE_TASKS

TASKS = {
    "default": {
        **_EXAMPLE_TASKS["default"],
        "OPTIONS": {**_EXAMPLE_TASKS["default"]["OPTIONS"], "MODULES": ["tests.tasks_worker"]},
    }
}
