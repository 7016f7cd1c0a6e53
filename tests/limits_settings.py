"""Settings of flow-control worker subprocesses: the example project plus ``tests/limits_flows.py``."""

from testproject.settings import *  # noqa: F403

PGFLOW = {"FLOWS": ["tests.limits_flows"]}
