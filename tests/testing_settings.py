"""Settings of worker subprocesses that run ``tests/integration/testing/flows.py`` beside the example
project's flows (the in-process versus worker comparison)."""

from testproject.settings import *  # noqa: F403
from testproject.settings import PGFLOW as _BASE

PGFLOW = {**_BASE, "FLOWS": [*_BASE["FLOWS"], "tests.integration.testing.flows"]}
