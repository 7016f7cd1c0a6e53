"""The bench's worker settings with OpenTelemetry's SDK recording and exporting none, and the worker
tracing one run in ten (``PGFLOW["TRACE_SAMPLE_RATE"]``): the cost of sampled tracing."""

from __future__ import annotations

from bench.otel_settings import *  # noqa: F403
from bench.otel_settings import PGFLOW as _TRACED_PGFLOW

PGFLOW = {**_TRACED_PGFLOW, "TRACE_SAMPLE_RATE": 0.1}
