"""A worker process's ``--metrics-port``: its claim loops' metrics, liveness and readiness on HTTP."""

from __future__ import annotations

import logging
import time

from pgflow_django.conf import LIVE_HEARTBEATS
from pgflow_django.observability.metrics import MetricsServer, Probe, WorkerMetrics
from pgflow_django.worker.queue_worker import QueueWorker

logger = logging.getLogger("pgflow_django.worker")


def probe(workers: list[QueueWorker]) -> Probe:
    """``/healthz``: every claim loop went round within ``LIVE_HEARTBEATS`` heartbeat periods (it wakes
    at least once per heartbeat), so a wedged loop is restarted. ``/readyz``: every loop is registered,
    polling, and its last claim reached the database."""

    def live() -> tuple[bool, str]:
        now = time.monotonic()
        for worker in workers:
            silent = now - worker.observe.last_beat
            limit = LIVE_HEARTBEATS * worker.options.heartbeat_seconds
            if silent > limit and not worker.state.stopping.is_set():
                return (
                    False,
                    f"queue={worker.queue}: claim loop silent for {silent:.0f}s (limit {limit:.0f}s)",
                )
        return True, "ok"

    def ready() -> tuple[bool, str]:
        for worker in workers:
            if not worker.ready:
                return (
                    False,
                    f"queue={worker.queue}: not polling (starting, stopping or database unreachable)",
                )
        return True, "ok"

    return Probe(live, ready)


def start_exporter(workers: list[QueueWorker], port: int, host: str) -> MetricsServer:
    """Instrument every claim loop of the process and serve them on one port."""
    metrics = WorkerMetrics()
    for worker in workers:
        worker.instrument(metrics)
    server = MetricsServer(metrics, probe(workers), port, host)
    server.start()
    logger.info("metrics on http://%s:%d/metrics (and /healthz, /readyz)", host, server.port)
    return server
