"""Settings of the pg_cron scenario's subprocesses: the example project, with PGFLOW["SCHEDULER"]
taken from PGFLOW_TEST_SCHEDULER (so one test can switch it between runs of ``migrate``)."""

import os

from testproject.settings import *  # noqa: F403

PGFLOW = {"SCHEDULER": os.environ.get("PGFLOW_TEST_SCHEDULER", "workers")}
