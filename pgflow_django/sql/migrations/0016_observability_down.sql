-- Reverse of 0016_observability: runs lose their recorded trace context.

alter table pgflow.runs drop column trace_context;
