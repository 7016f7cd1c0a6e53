"""The example project with a task module that raises at import in OPTIONS['MODULES']."""

from testproject.settings import *  # noqa: F403
from testproject.settings import TASKS as _EXAMPLE_TASKS

TASKS = {
    "default": {
        **_EXAMPLE_TASKS["default"],
        "OPTIONS": {**_EXAMPLE_TASKS["default"]["OPTIONS"], "MODULES": ["tests.broken_tasks"]},
    }
}
