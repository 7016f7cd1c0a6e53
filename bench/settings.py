"""Settings for the bench's worker subprocesses: the test project's, plus the bench flows."""

from __future__ import annotations

from testproject.settings import *  # noqa: F403
from testproject.settings import PGFLOW as _BASE_PGFLOW

PGFLOW = {**_BASE_PGFLOW, "FLOWS": [*_BASE_PGFLOW.get("FLOWS", []), "bench.flows", "bench.support_flows"]}
DEBUG = False
