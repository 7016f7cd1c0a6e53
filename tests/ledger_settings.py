"""Settings of reliability worker subprocesses: the example project plus ``tests/ledger_flows.py``."""

from testproject.settings import *  # noqa: F403

PGFLOW = {"FLOWS": ["tests.ledger_flows"]}
