"""Settings for command subprocesses: the example project plus the command tests' flows."""

from testproject.settings import *  # noqa: F403
from tests.integration.commands_flows import REGISTERED

PGFLOW = {"FLOWS": REGISTERED}
