"""Two pgflow databases in one project: ``default`` (``PGFLOW_TEST_URL_A``) and ``second``
(``PGFLOW_TEST_URL_B``), each migrated on its own, with a task backend on each."""

import os

import dj_database_url

from testproject.settings import *  # noqa: F403
from testproject.settings import TASKS

DATABASES = {
    "default": dj_database_url.parse(os.environ["PGFLOW_TEST_URL_A"], conn_max_age=0),
    "second": dj_database_url.parse(os.environ["PGFLOW_TEST_URL_B"], conn_max_age=0),
}
TASKS = {
    **TASKS,
    "second": {
        **TASKS["default"],
        "OPTIONS": {**TASKS["default"]["OPTIONS"], "DATABASE": "second", "MODULES": ["tests.multidb_tasks"]},
    },
}
