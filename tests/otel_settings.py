"""Settings of worker subprocesses that trace with the OpenTelemetry SDK: every finished span is
written as one JSON line to the file named by ``PGFLOW_TEST_SPANS``, as a collector would receive it."""

import os

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor

from testproject.settings import *  # noqa: F403

_provider = TracerProvider()
_provider.add_span_processor(
    SimpleSpanProcessor(
        ConsoleSpanExporter(
            out=open(os.environ["PGFLOW_TEST_SPANS"], "a", encoding="utf-8"),  # noqa: SIM115
            formatter=lambda span: span.to_json(indent=None) + "\n",
        )
    )
)
trace.set_tracer_provider(_provider)
