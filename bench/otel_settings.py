"""The bench's worker settings with OpenTelemetry's SDK recording every span and exporting none:
the cost of tracing itself (span per task attempt, the runs' trace-context lookup), not of a
collector."""

from __future__ import annotations

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider

from bench.settings import *  # noqa: F403

trace.set_tracer_provider(TracerProvider())
