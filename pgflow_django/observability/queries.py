"""The statements only metrics and tracing send."""

from __future__ import annotations

from typing import Final

from pgflow_django.db.query import value_query

SET_TRACE_CONTEXT: Final = value_query(
    "set_trace_context",
    "with traced as (update pgflow.runs set trace_context = %s::jsonb where run_id = any(%s::uuid[])"
    " returning 1) select count(*) as value from traced",
)
"""Record the starter's W3C trace context on runs it just started (in the starting transaction)."""


SET_LOCAL_STATEMENT_TIMEOUT: Final = value_query(
    "set_local_statement_timeout", "select set_config('statement_timeout', %s, true) as value"
)
