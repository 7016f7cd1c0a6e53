"""Prometheus metrics: a real worker process scraped over HTTP on 127.0.0.1, and the database-wide
gauges of ``pgflow_django.observability.metrics.view`` and ``pgflow_metrics``, parsed with
``prometheus_client``."""

from __future__ import annotations

import socket
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

import pytest
from django.core.management import call_command
from django.test import Client, RequestFactory
from prometheus_client.parser import text_string_to_metric_families

from pgflow_django import Flow, compile_flow, start_flow, start_flows, wait_for_run
from pgflow_django.observability import metrics
from pgflow_django.runs.operations import pause
from tests.sql.support import q
from tests.workers import WorkerProcess, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def samples(text: str) -> Samples:
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(found: Samples, name: str, **labels: str) -> float:
    return found[(name, frozenset(labels.items()))]


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return int(response.status), response.read().decode()
    except urllib.error.HTTPError as exc:
        return int(exc.code), exc.read().decode()


def test_a_worker_serves_its_counters_histograms_and_probes(
    spawn_worker: Callable[..., WorkerProcess],
) -> None:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    worker = spawn_worker("example_map", "--metrics-port", str(port), "--metrics-host", "127.0.0.1")
    assert f"metrics on http://127.0.0.1:{port}/metrics" in worker.log()
    run = wait_for_run(start_flow("example_map", {"count": 5}), timeout=30)
    assert run.status == "completed"
    labels = {"flow": "example_map", "queue": "example_map"}

    def scraped() -> Samples | None:
        found = samples(get(f"{base}/metrics")[1])
        done = found.get(("pgflow_tasks_completed_total", frozenset({**labels, "step": "total"}.items())))
        return found if done == 1 else None

    found = wait_until(scraped, 10, "the last completion to be counted")
    for step, count in (("numbers", 1), ("square", 5), ("total", 1)):
        assert value(found, "pgflow_tasks_claimed_total", step=step, **labels) == count
        assert value(found, "pgflow_tasks_completed_total", step=step, **labels) == count
        assert value(found, "pgflow_task_duration_seconds_count", step=step, **labels) == count
    assert not any(name == "pgflow_tasks_failed_total" for name, _ in found)
    assert value(found, "pgflow_claim_duration_seconds_count", queue="example_map") >= 3
    assert value(found, "pgflow_completion_duration_seconds_count", queue="example_map") >= 3
    assert value(found, "pgflow_tasks_in_flight", queue="example_map") == 0
    # idle: every slot free, the --concurrency 10, or the default --prefetch 100 while handlers are short
    assert value(found, "pgflow_worker_free_slots", queue="example_map") in {10, 100}
    info = [labels for (name, labels) in found if name == "pgflow_worker_queue_info"]
    assert dict(info[0])["worker_id"] == worker.worker_id
    assert get(f"{base}/healthz") == (200, "ok\n")
    assert get(f"{base}/readyz") == (200, "ok\n")
    assert get(f"{base}/other")[0] == 404
    worker.terminate()
    assert worker.wait(20) == 0


def test_retries_and_exhausted_attempts_are_counted(spawn_worker: Callable[..., WorkerProcess]) -> None:
    port = free_port()
    spawn_worker("example_flaky", "--metrics-port", str(port), "--metrics-host", "127.0.0.1")
    assert wait_for_run(start_flow("example_flaky", {}), timeout=30).status == "completed"
    labels = {"flow": "example_flaky", "queue": "example_flaky"}
    found = samples(get(f"http://127.0.0.1:{port}/metrics")[1])
    assert value(found, "pgflow_tasks_retried_total", step="wobble", **labels) == 1
    assert value(found, "pgflow_tasks_retried_total", step="patient", **labels) == 1
    assert value(found, "pgflow_tasks_claimed_total", step="wobble", **labels) == 2
    assert value(found, "pgflow_tasks_completed_total", step="patient", **labels) == 1


def test_a_metrics_port_in_use_is_one_line(spawn_worker: Callable[..., WorkerProcess]) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        worker = spawn_worker(
            "example_chain", "--metrics-port", str(port), "--metrics-host", "127.0.0.1", ready=False
        )
        assert worker.wait(30) == 1
    assert f"cannot serve metrics on 127.0.0.1:{port}" in worker.log()
    assert "Traceback" not in worker.log()


gauged = Flow("otest_gauges", timeout=5)


@gauged.step()
def only(flow_input: Any) -> Any:
    return flow_input


@pytest.fixture
def gauged_flow(transactional_db: None) -> Any:
    compile_flow(gauged, on_change="replace")
    yield gauged
    q("select pgflow.delete_flow_and_data('otest_gauges')")


def test_database_gauges_from_the_view_and_the_command(gauged_flow: Flow, tmp_path: Any) -> None:
    start_flows(gauged_flow, [{"i": i} for i in range(3)])
    q("update pgmq.q_otest_gauges set enqueued_at = clock_timestamp() - interval '90 seconds'")
    assert metrics.view(RequestFactory().get("/metrics/")).status_code == 200
    response = Client().get("/metrics/")  # as the docs mount it (testproject/urls.py)
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain; version=")
    found = samples(response.content.decode())
    assert value(found, "pgflow_queue_visible_messages", queue="otest_gauges") == 3
    assert value(found, "pgflow_queue_hidden_messages", queue="otest_gauges") == 0
    assert 89 < value(found, "pgflow_queue_oldest_visible_message_age_seconds", queue="otest_gauges") < 120
    assert value(found, "pgflow_runs", flow="otest_gauges", status="started") == 3
    assert value(found, "pgflow_live_workers", queue="otest_gauges", flow="otest_gauges", step="only") == 0
    assert value(found, "pgflow_subscription_paused", flow="otest_gauges", step="only", reason="") == 0
    pause("otest_gauges")
    output = tmp_path / "pgflow.prom"
    call_command("pgflow_metrics", "--output", str(output))
    found = samples(output.read_text())
    paused = value(found, "pgflow_subscription_paused", flow="otest_gauges", step="only", reason="operator")
    assert paused == 1
    assert value(found, "pgflow_queue_visible_messages", queue="otest_gauges") == 3


def test_stalled_tasks_are_a_gauge(gauged_flow: Flow) -> None:
    start_flow(gauged_flow, {})
    q(
        "update pgflow.step_tasks set status = 'started', attempts_count = 1,"
        " started_at = now() - interval '40 seconds' where flow_slug = 'otest_gauges'"
    )
    found = samples(metrics.database_text().decode())
    assert value(found, "pgflow_stalled_tasks", queue="otest_gauges", flow="otest_gauges", step="only") == 1
