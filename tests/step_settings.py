"""Settings of worker subprocesses that run ``testproject/example/step_flows.py`` (a step-queued flow)
beside the example project's flows."""

from testproject.settings import *  # noqa: F403
from testproject.settings import PGFLOW as _BASE

PGFLOW = {**_BASE, "FLOWS": [*_BASE["FLOWS"], "testproject.example.step_flows"]}
