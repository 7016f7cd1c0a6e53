"""Settings of the worker subprocesses that run docs/durable.md's flows and the restart scenario's."""

from testproject.settings import *  # noqa: F403

PGFLOW = {"FLOWS": ["tests.integration.durable.docs_flows", "tests.durable_flows"]}
