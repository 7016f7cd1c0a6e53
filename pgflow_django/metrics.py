"""Prometheus metrics, with ``prometheus-client`` (the ``[metrics]`` extra).

Two sources, so that N workers never multiply database polling:

- each ``pgflow_worker --metrics-port P`` serves its own counters and histograms (tasks, handler and
  statement durations, slots) on ``http://HOST:P/metrics``, with ``/healthz`` and ``/readyz``;
- the database-wide gauges (queue depth, oldest visible message, runs by status, stalled tasks, live
  workers, pauses) come from one bounded statement, served by :func:`view` (mount it once:
  ``path("metrics/", pgflow_django.metrics.view)``) and by ``manage.py pgflow_metrics``.

Labels are bounded: flow, step, queue, status, outcome; never a run id or a message id.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import metadata
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from django.http import HttpRequest, HttpResponse
    from prometheus_client import CollectorRegistry, Counter, Histogram
    from prometheus_client.core import Metric

INSTALL_HINT: Final = "metrics need prometheus-client: pip install 'pgflow-django[metrics]'"
STATEMENT_TIMEOUT_MS: Final = 5000
"""The database-wide statement gives up after this long rather than pile up under a slow scrape."""
TASK_BUCKETS: Final = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 900)
STATEMENT_BUCKETS: Final = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5)
TASK_LABELS: Final = ("flow", "step", "queue")


class MetricsUnavailable(RuntimeError):
    """``prometheus-client`` is not installed."""


def available() -> bool:
    try:
        import prometheus_client  # noqa: F401
    except ImportError:
        return False
    return True


def require() -> None:
    if not available():
        raise MetricsUnavailable(INSTALL_HINT)


def package_version() -> str:
    try:
        return metadata.version("pgflow-django")
    except metadata.PackageNotFoundError:
        return "unknown"


class WorkerMetrics:
    """One worker process's metrics, in their own registry (every claim loop of the process adds its
    queue's series to it). Label children are cached: a lookup per task would cost more than the count."""

    def __init__(self) -> None:
        require()
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info

        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.claimed = Counter("pgflow_tasks_claimed", "Tasks claimed", TASK_LABELS, registry=r)
        self.completed = Counter("pgflow_tasks_completed", "Tasks completed", TASK_LABELS, registry=r)
        self.failed = Counter(
            "pgflow_tasks_failed", "Tasks whose last attempt failed", TASK_LABELS, registry=r
        )
        self.retried = Counter(
            "pgflow_tasks_retried", "Failed attempts that will be retried", TASK_LABELS, registry=r
        )
        self.stale = Counter(
            "pgflow_tasks_stale",
            "Results ignored because the claim was no longer current",
            TASK_LABELS,
            registry=r,
        )
        self.task_duration = Histogram(
            "pgflow_task_duration_seconds",
            "Handler run time of one task attempt",
            TASK_LABELS,
            buckets=TASK_BUCKETS,
            registry=r,
        )
        self.claim_duration = Histogram(
            "pgflow_claim_duration_seconds",
            "Latency of one claim statement (read and start tasks)",
            ("queue",),
            buckets=STATEMENT_BUCKETS,
            registry=r,
        )
        self.completion_duration = Histogram(
            "pgflow_completion_duration_seconds",
            "Latency of one completion statement (a batch of results)",
            ("queue",),
            buckets=STATEMENT_BUCKETS,
            registry=r,
        )
        self.in_flight = Gauge("pgflow_tasks_in_flight", "Tasks this worker holds", ("queue",), registry=r)
        self.free_slots = Gauge("pgflow_worker_free_slots", "Free handler slots", ("queue",), registry=r)
        self.released = Counter(
            "pgflow_tasks_released",
            "Claims handed back to the queue at shutdown or unstarted after 0.5 s (visible again at once)",
            ("queue",),
            registry=r,
        )
        self.recoveries = Counter(
            "pgflow_stalled_recoveries",
            "Tasks this worker's stalled-task recovery requeued or failed as permanently stalled",
            ("outcome",),
            registry=r,
        )
        self.pauses = Counter(
            "pgflow_worker_pauses",
            "Times a claim loop stopped for a paused subscription",
            ("queue", "reason"),
            registry=r,
        )
        self.info = Info("pgflow_worker", "This worker process", registry=r)
        self.info.info({"version": package_version()})
        self._children: dict[tuple[Any, ...], Any] = {}
        self._lock = threading.Lock()

    def child(self, metric: Counter | Histogram, *labels: str) -> Any:
        """``metric.labels(*labels)``, cached."""
        key = (id(metric), *labels)
        found = self._children.get(key)
        if found is None:
            with self._lock:
                found = self._children[key] = metric.labels(*labels)
        return found

    def watch_queue(
        self,
        queue: str,
        worker_id: uuid.UUID,
        subscription: str,
        in_flight: Callable[[], int],
        free: Callable[[], int],
    ) -> None:
        """Gauges read from the claim loop's slots at scrape time, and the loop's identity."""
        self.in_flight.labels(queue).set_function(lambda: float(in_flight()))
        self.free_slots.labels(queue).set_function(lambda: float(free()))
        from prometheus_client import Info

        Info(
            "pgflow_worker_queue",
            "A claim loop of this worker process",
            ("queue",),
            registry=self.registry,
        ).labels(queue).info({"worker_id": str(worker_id), "subscription": subscription})

    def text(self) -> bytes:
        from prometheus_client import generate_latest

        return generate_latest(self.registry)


# -- database-wide gauges ------------------------------------------------------------------------------

DATABASE_GAUGES: Final = {
    "queue_visible": ("pgflow_queue_visible_messages", "Messages ready to be read", ("queue",)),
    "queue_hidden": (
        "pgflow_queue_hidden_messages",
        "Messages invisible for now (claimed, or delayed)",
        ("queue",),
    ),
    "queue_oldest_visible_age": (
        "pgflow_queue_oldest_visible_message_age_seconds",
        "Age of the oldest visible message (0 when none is visible)",
        ("queue",),
    ),
    "runs": ("pgflow_runs", "Runs by flow and status", ("flow", "status")),
    "stalled_tasks": (
        "pgflow_stalled_tasks",
        "Started tasks past their timeout + 30 s (stalled-task recovery will requeue them)",
        ("queue", "flow", "step"),
    ),
    "live_workers": (
        "pgflow_live_workers",
        "Live workers (recent heartbeat) that run each flow step",
        ("queue", "flow", "step"),
    ),
    "paused": (
        "pgflow_subscription_paused",
        "1 when a pause holds the flow step",
        ("flow", "step", "reason"),
    ),
}
"""Each sample name of ``queries.database_metrics``: the gauge it fills, its help and its labels."""

_LABEL_FIELDS: Final = {
    "queue": "queue_name",
    "flow": "flow_slug",
    "step": "step_slug",
    "status": "status",
    "reason": "status",
}


def database_samples(using: str = "default") -> list[Any]:
    """The database-wide samples, from one statement under a statement timeout."""
    from django.db import connections, transaction

    from pgflow_django import queries
    from pgflow_django.conf import live_worker_seconds

    with transaction.atomic(using=using), connections[using].cursor() as cursor:
        queries.value(cursor, queries.SET_LOCAL_STATEMENT_TIMEOUT, [str(STATEMENT_TIMEOUT_MS)])
        tables = [
            (row.queue_name, row.table)
            for row in queries.fetch_all(cursor, queries.FLOW_QUEUE_TABLES, {"flows": None})
        ]
        return queries.fetch_all(
            cursor, queries.database_metrics(tables), {"live_seconds": live_worker_seconds()}
        )


class DatabaseCollector:
    """A ``prometheus_client`` collector reading the database-wide gauges at each collection."""

    def __init__(self, using: str = "default") -> None:
        self.using = using

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        from prometheus_client.core import GaugeMetricFamily

        families = {
            name: GaugeMetricFamily(metric, help_text, labels=list(labels))
            for name, (metric, help_text, labels) in DATABASE_GAUGES.items()
        }
        for sample in database_samples(self.using):
            spec = DATABASE_GAUGES.get(sample.name)
            if spec is None:
                continue
            families[sample.name].add_metric(
                [str(getattr(sample, _LABEL_FIELDS[label])) for label in spec[2]], sample.value
            )
        yield from families.values()


def database_registry(using: str = "default") -> CollectorRegistry:
    require()
    from prometheus_client import CollectorRegistry

    registry = CollectorRegistry(auto_describe=False)
    registry.register(DatabaseCollector(using))
    return registry


def database_text(using: str = "default") -> bytes:
    """The database-wide gauges in Prometheus' text format."""
    from prometheus_client import generate_latest

    return generate_latest(database_registry(using))


def view(request: HttpRequest) -> HttpResponse:
    """Django view of the database-wide gauges: ``path("metrics/", pgflow_django.metrics.view)``.
    Protect it as any internal endpoint (network policy, or wrap it in your own auth decorator)."""
    from django.http import HttpResponse
    from prometheus_client import CONTENT_TYPE_LATEST

    return HttpResponse(database_text(), content_type=CONTENT_TYPE_LATEST)


# -- the worker's port ---------------------------------------------------------------------------------


class Probe:
    """Liveness and readiness a worker's port answers: each takes no argument and returns
    (ok, one-line reason)."""

    def __init__(self, live: Callable[[], tuple[bool, str]], ready: Callable[[], tuple[bool, str]]) -> None:
        self.live = live
        self.ready = ready


class MetricsServer:
    """``/metrics``, ``/healthz`` and ``/readyz`` on one port, in a daemon thread."""

    def __init__(self, metrics: WorkerMetrics, probe: Probe, port: int, host: str = "0.0.0.0") -> None:
        self.metrics = metrics
        self.probe = probe
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                if path == "/metrics":
                    from prometheus_client import CONTENT_TYPE_LATEST

                    self._answer(200, server.metrics.text(), CONTENT_TYPE_LATEST)
                elif path in ("/healthz", "/readyz"):
                    ok, reason = (server.probe.live if path == "/healthz" else server.probe.ready)()
                    self._answer(200 if ok else 503, (reason + "\n").encode(), "text/plain; charset=utf-8")
                else:
                    self._answer(404, b"not found: /metrics, /healthz, /readyz\n", "text/plain")

            def _answer(self, code: int, body: bytes, content_type: str) -> None:
                self.send_response(code)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                """Scrapes every few seconds are not worth a log line each."""

        self.httpd = ThreadingHTTPServer((host, port), Handler)
        self.httpd.daemon_threads = True
        self.port = int(self.httpd.server_address[1])
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="pgflow-metrics", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
