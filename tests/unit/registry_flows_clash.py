"""A second, different flow that reuses the slug of ``registry_flows.alpha``."""

from __future__ import annotations

from pgflow_django import Flow

alpha_again = Flow("registry_alpha")
