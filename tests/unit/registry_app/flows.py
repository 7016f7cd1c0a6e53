from __future__ import annotations

from pgflow_django import Flow
from tests.unit.registry_flows import beta

discovered = Flow("registry_discovered")
reexported = beta
