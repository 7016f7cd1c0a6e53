"""The worker's ``/metrics`` is ``prometheus_client``'s own WSGI app: gzip when the scraper takes it,
OpenMetrics when its ``Accept`` asks for it, Prometheus text otherwise; ``/healthz`` and ``/readyz``
answer as before, never compressed. A real server on 127.0.0.1, read with a real HTTP client."""

from __future__ import annotations

import gzip
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families as openmetrics_families
from prometheus_client.parser import text_string_to_metric_families

from pgflow_django import Flow
from pgflow_django.observability.metrics import MetricsServer, WorkerMetrics
from pgflow_django.worker.exporter import probe
from pgflow_django.worker.options import WorkerOptions
from pgflow_django.worker.queue_worker import QueueWorker

flow = Flow("otest_port_formats")


@flow.step()
def only(flow_input: Any) -> Any:
    return flow_input


@pytest.fixture
def server() -> Iterator[MetricsServer]:
    metrics = WorkerMetrics()
    metrics.child(metrics.claimed, "orders", "charge", "orders").inc(3)
    started = MetricsServer(metrics, probe([QueueWorker(flow, WorkerOptions())]), 0, "127.0.0.1")
    started.start()
    yield started
    started.stop()


def get(server: MetricsServer, path: str, **headers: str) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(f"http://127.0.0.1:{server.port}{path}", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return int(response.status), dict(response.headers.items()), response.read()
    except urllib.error.HTTPError as exc:
        return int(exc.code), dict(exc.headers.items()), exc.read()


def claimed(families: Iterator[Any]) -> float:
    [sample] = [
        sample
        for family in families
        for sample in family.samples
        if sample.name == "pgflow_tasks_claimed_total"
    ]
    assert sample.labels == {"flow": "orders", "step": "charge", "queue": "orders"}
    return float(sample.value)


def test_plain_text_by_default(server: MetricsServer) -> None:
    status, headers, body = get(server, "/metrics")
    assert status == 200 and "Content-Encoding" not in headers
    assert headers["Content-Type"].startswith("text/plain; version=0.0.4")
    assert int(headers["Content-Length"]) == len(body)
    assert claimed(text_string_to_metric_families(body.decode())) == 3


def test_gzip_when_the_client_accepts_it(server: MetricsServer) -> None:
    status, headers, body = get(server, "/metrics", **{"Accept-Encoding": "gzip, deflate"})
    assert status == 200 and headers["Content-Encoding"] == "gzip"
    assert int(headers["Content-Length"]) == len(body)
    text = gzip.decompress(body).decode()
    assert claimed(text_string_to_metric_families(text)) == 3
    assert len(body) < len(text.encode())


def test_openmetrics_when_the_client_asks_for_it(server: MetricsServer) -> None:
    accept = "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5"
    status, headers, body = get(server, "/metrics", Accept=accept, **{"Accept-Encoding": "gzip"})
    assert status == 200 and headers["Content-Encoding"] == "gzip"
    assert headers["Content-Type"].startswith("application/openmetrics-text; version=1.0.0")
    text = gzip.decompress(body).decode()
    assert text.endswith("# EOF\n")
    assert claimed(openmetrics_families(text)) == 3


def test_name_selects_series(server: MetricsServer) -> None:
    status, _, body = get(server, "/metrics?name[]=pgflow_tasks_claimed_total")
    families = list(text_string_to_metric_families(body.decode()))
    assert status == 200 and [family.name for family in families] == ["pgflow_tasks_claimed"]


def test_probes_answer_as_before_whatever_the_client_accepts(server: MetricsServer) -> None:
    asks = {"Accept": "application/openmetrics-text", "Accept-Encoding": "gzip"}
    for path, code, text in (
        ("/healthz", 200, b"ok\n"),
        (
            "/readyz",
            503,
            b"queue=otest_port_formats: not polling (starting, stopping or database unreachable)\n",
        ),
    ):
        status, headers, body = get(server, path, **asks)
        assert (status, body) == (code, text)
        assert headers["Content-Type"] == "text/plain; charset=utf-8" and "Content-Encoding" not in headers
    status, headers, body = get(server, "/metrics/other", **asks)
    assert (status, body, headers["Content-Type"]) == (
        404,
        b"not found: /metrics, /healthz, /readyz\n",
        "text/plain",
    )
