-- Frozen migration delta 0016_observability (loaded by pgflow_django/migrations/0016_observability.py):
-- a run keeps the W3C trace context (traceparent, tracestate) of the code that started it, so the
-- worker's span of each task attempt joins the starter's trace. Written by start_flow/start_flows in
-- the starting transaction, only when the caller is inside a trace; null otherwise.

alter table pgflow.runs add column trace_context jsonb;
