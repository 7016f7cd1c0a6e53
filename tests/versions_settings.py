"""Settings of the rolling-deploy scenario's worker processes: the release ``PGFLOW_TEST_RELEASE`` names."""

from testproject.settings import *  # noqa: F403

PGFLOW = {"FLOWS": ["tests.versions_flows.deploy", "tests.versions_flows.deploy_routed"]}
