"""What pgflow tells the outside as it works: Prometheus metrics (``metrics``) and OpenTelemetry
traces (``tracing``). Database health is ``management.health``; queue coverage ``runs.coverage``."""
