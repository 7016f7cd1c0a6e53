"""What pgflow tells the outside: Prometheus metrics (``metrics``), OpenTelemetry traces
(``tracing``), database health (``health``) and queue coverage (``coverage``)."""
