"""The metrics port's probes: ``/healthz`` fails once a claim loop is silent for 3 heartbeat periods,
``/readyz`` until the loop is registered and its last claim reached the database."""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from typing import Any

from pgflow_django import Flow
from pgflow_django.observability.metrics import MetricsServer, WorkerMetrics
from pgflow_django.worker.exporter import probe
from pgflow_django.worker.options import WorkerOptions
from pgflow_django.worker.queue_worker import QueueWorker

flow = Flow("otest_probe")


@flow.step()
def only(flow_input: Any) -> Any:
    return flow_input


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return int(response.status), response.read().decode()
    except urllib.error.HTTPError as exc:
        return int(exc.code), exc.read().decode()


def test_liveness_and_readiness_follow_the_claim_loop() -> None:
    worker = QueueWorker(flow, WorkerOptions(heartbeat_seconds=2.0))
    server = MetricsServer(WorkerMetrics(), probe([worker]), 0, "127.0.0.1")
    server.start()
    base = f"http://127.0.0.1:{server.port}"
    try:
        assert get(f"{base}/healthz") == (200, "ok\n")
        status, reason = get(f"{base}/readyz")
        assert status == 503 and reason.startswith("queue=otest_probe: not polling")
        worker._registered = True
        worker.observe.claimed([], 0.001)
        assert get(f"{base}/readyz") == (200, "ok\n")
        worker.observe.loop_failed()
        assert get(f"{base}/readyz")[0] == 503
        worker.observe.last_beat = time.monotonic() - 7
        status, reason = get(f"{base}/healthz")
        assert status == 503 and reason == "queue=otest_probe: claim loop silent for 7s (limit 6s)\n"
        worker.state.request_stop()  # a draining loop stops going round: that is no failure
        assert get(f"{base}/healthz") == (200, "ok\n")
        assert get(f"{base}/readyz")[0] == 503
    finally:
        server.stop()
