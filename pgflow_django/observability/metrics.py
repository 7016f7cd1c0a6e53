"""Prometheus metrics, with ``prometheus-client`` (the ``[metrics]`` extra).

Two sources, so that N workers never multiply database polling:

- each ``pgflow_worker --metrics-port P`` serves its own counters and histograms (tasks, handler and
  statement durations, slots) on ``http://HOST:P/metrics``, with ``/healthz`` and ``/readyz``;
- the database-wide gauges (queue depth, oldest visible message, runs by status, stalled tasks, live
  workers, pauses) come from one bounded statement, served by :func:`view` (mount it once:
  ``path("metrics/", pgflow_django.observability.metrics.view)``) and by ``manage.py pgflow_metrics``.

Labels are bounded: flow, step, queue, status, outcome; never a run id or a message id.
"""

from __future__ import annotations

import contextlib
import errno
import io
import logging
import queue
import selectors
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from importlib import metadata
from typing import TYPE_CHECKING, Any, Final, cast

if TYPE_CHECKING:
    from wsgiref.types import WSGIApplication as WsgiApp

    from django.http import HttpRequest, HttpResponse
    from prometheus_client import CollectorRegistry, Counter, Histogram
    from prometheus_client.core import Metric

INSTALL_HINT: Final = "metrics need prometheus-client: pip install 'pgflow-django[metrics]'"
STATEMENT_TIMEOUT_MS: Final = 5000
"""The database-wide statement gives up after this long rather than pile up under a slow scrape."""
TASK_BUCKETS: Final = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 900)
STATEMENT_BUCKETS: Final = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5)
TASK_LABELS: Final = ("flow", "step", "queue")
READ_TIMEOUT_SECONDS: Final = 5.0
"""A worker port's connection whose request head has not arrived this long after it opened is closed."""
HANDLER_THREADS: Final = 4
"""Threads answering a worker port's complete requests (one more accepts and reads them)."""
MAX_CONNECTIONS: Final = 256
"""Connections a worker port holds open at once; past it, the oldest still sending its head is closed."""
MAX_HEAD_BYTES: Final = 16 * 1024
"""A connection whose request head (request line and headers) grows past this is closed unanswered."""
LISTEN_BACKLOG: Final = 128
ACCEPT_PAUSE_SECONDS: Final = 0.1

logger = logging.getLogger("pgflow_django.worker")


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

    def wsgi_app(self) -> WsgiApp:
        """``prometheus_client``'s own WSGI app over this registry: it answers in the format the
        scraper's ``Accept`` asks for (OpenMetrics or Prometheus text), gzipped when its
        ``Accept-Encoding`` takes gzip, and only the series ``?name[]=`` names when given."""
        from prometheus_client import make_wsgi_app

        return cast("WsgiApp", make_wsgi_app(self.registry))


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
"""Each sample name of ``db_queries.database_metrics``: the gauge it fills, its help and its labels."""

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

    from pgflow_django.conf import live_worker_seconds
    from pgflow_django.db import queries as db_queries
    from pgflow_django.db.query import fetch_all, fetch_value
    from pgflow_django.observability import queries

    with transaction.atomic(using=using), connections[using].cursor() as cursor:
        fetch_value(cursor, queries.SET_LOCAL_STATEMENT_TIMEOUT, [str(STATEMENT_TIMEOUT_MS)])
        tables = [
            (row.queue_name, row.table)
            for row in fetch_all(cursor, db_queries.FLOW_QUEUE_TABLES, {"flows": None})
        ]
        return fetch_all(cursor, db_queries.database_metrics(tables), {"live_seconds": live_worker_seconds()})


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
    """Django view of the database-wide gauges:
    ``path("metrics/", pgflow_django.observability.metrics.view)``.
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
    """``/metrics``, ``/healthz`` and ``/readyz`` on one port, on a fixed number of threads.

    Idle clients must cost no thread (a thread per connection made 2,000 idle clients 2,000 threads),
    so one thread accepts connections and collects their request heads without blocking, and only a
    complete head goes to one of ``handler_threads`` threads, which answer it with ``http.server``'s
    parsing and never wait for a client to send. A connection whose head is not complete
    ``read_timeout`` seconds after it opened (idle, or sending a byte at a time) is closed, and past
    ``max_connections`` the oldest still sending is closed: a flood of clients takes neither threads
    nor the worker's file descriptors, and a probe still gets its answer."""

    def __init__(
        self,
        metrics: WorkerMetrics,
        probe: Probe,
        port: int,
        host: str = "0.0.0.0",
        *,
        read_timeout: float = READ_TIMEOUT_SECONDS,
        handler_threads: int = HANDLER_THREADS,
        max_connections: int = MAX_CONNECTIONS,
    ) -> None:
        self.metrics = metrics
        self.metrics_app = metrics.wsgi_app()
        self.probe = probe
        self.host = host
        self.read_timeout = read_timeout
        self.max_connections = max_connections
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self._listener.bind((host, port))
            self._listener.listen(LISTEN_BACKLOG)
        except OSError:
            self._listener.close()
            raise
        self._listener.setblocking(False)
        self.port = int(self._listener.getsockname()[1])
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._listener, selectors.EVENT_READ)
        self._wake_read, self._wake_write = socket.socketpair()
        self._wake_read.setblocking(False)
        self._selector.register(self._wake_read, selectors.EVENT_READ)
        self._waiting: dict[socket.socket, _Waiting] = {}
        """Accepted connections whose request head is not complete yet, oldest first."""
        self._answering = 0
        self._lock = threading.Lock()
        self._stopping = False
        self._heads: queue.SimpleQueue[tuple[socket.socket, Any, bytes] | None] = queue.SimpleQueue()
        self._threads = [threading.Thread(target=self._accept_loop, name="pgflow-metrics", daemon=True)] + [
            threading.Thread(target=self._answer_loop, name=f"pgflow-metrics-{n}", daemon=True)
            for n in range(handler_threads)
        ]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        self._stopping = True
        self._wake_write.send(b"x")
        for _ in self._threads[1:]:
            self._heads.put(None)
        deadline = time.monotonic() + self.read_timeout + 1  # an answer a client does not read
        for thread in self._threads:
            if thread.is_alive():
                thread.join(max(0.0, deadline - time.monotonic()))
        self._selector.close()
        for sock in (self._listener, self._wake_read, self._wake_write):
            sock.close()

    def _accept_loop(self) -> None:
        while not self._stopping:
            now = time.monotonic()
            while self._waiting:  # accepted in order, so their deadlines are in order too
                oldest, waiting = next(iter(self._waiting.items()))
                if waiting.deadline > now:
                    break
                self._drop(oldest)
            timeout = next(iter(self._waiting.values())).deadline - now if self._waiting else None
            for key, _ in self._selector.select(timeout):
                if key.fileobj is self._listener:
                    self._accept()
                elif key.fileobj is not self._wake_read:
                    self._receive(cast(socket.socket, key.fileobj))
        for sock in list(self._waiting):
            self._drop(sock)

    def _accept(self) -> None:
        while True:
            try:
                sock, address = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:  # the client gave up, or the process is out of file descriptors
                if exc.errno in (errno.EMFILE, errno.ENFILE):
                    if self._waiting:
                        self._drop(next(iter(self._waiting)))
                    else:
                        time.sleep(ACCEPT_PAUSE_SECONDS)  # the listener stays readable: do not spin
                return
            with self._lock:
                answering = self._answering
            if len(self._waiting) + answering >= self.max_connections:
                if not self._waiting:
                    sock.close()
                    continue
                self._drop(next(iter(self._waiting)))
            sock.setblocking(False)
            self._waiting[sock] = _Waiting(time.monotonic() + self.read_timeout, address)
            self._selector.register(sock, selectors.EVENT_READ)

    def _receive(self, sock: socket.socket) -> None:
        waiting = self._waiting[sock]
        try:
            data = sock.recv(MAX_HEAD_BYTES + 1 - len(waiting.head))
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        waiting.head += data
        if b"\n\r\n" in waiting.head or b"\n\n" in waiting.head:
            self._selector.unregister(sock)
            del self._waiting[sock]
            with self._lock:
                self._answering += 1
            self._heads.put((sock, waiting.address, bytes(waiting.head)))
        elif not data or len(waiting.head) > MAX_HEAD_BYTES:
            self._drop(sock)

    def _drop(self, sock: socket.socket) -> None:
        self._selector.unregister(sock)
        del self._waiting[sock]
        sock.close()

    def _answer_loop(self) -> None:
        while (item := self._heads.get()) is not None:
            sock, address, head = item
            try:
                sock.settimeout(self.read_timeout)  # a client that does not read its answer
                _Handler(sock, address, self, head)
            except OSError:
                logger.debug("metrics port: the client went away", exc_info=True)
            except Exception:
                logger.exception("metrics port: answering %s failed", address)
            finally:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()
                with self._lock:
                    self._answering -= 1


@dataclass
class _Waiting:
    deadline: float
    address: Any
    head: bytearray = field(default_factory=bytearray)


class _Handler(BaseHTTPRequestHandler):
    """One request, read from the head the accepting thread collected (GET has no body)."""

    server: MetricsServer  # type: ignore[assignment]

    def __init__(self, sock: socket.socket, address: Any, server: MetricsServer, head: bytes) -> None:
        self.head = head
        super().__init__(sock, address, server)  # type: ignore[arg-type]

    def setup(self) -> None:
        super().setup()
        self.rfile.close()
        self.rfile = io.BytesIO(self.head)

    def do_GET(self) -> None:
        path, _, query = self.path.partition("?")
        if path == "/metrics":
            self._answer_wsgi(self.server.metrics_app, path, query)
        elif path in ("/healthz", "/readyz"):
            ok, reason = (self.server.probe.live if path == "/healthz" else self.server.probe.ready)()
            self._answer(
                200 if ok else 503, (reason + "\n").encode(), [("Content-Type", "text/plain; charset=utf-8")]
            )
        else:
            self._answer(404, b"not found: /metrics, /healthz, /readyz\n", [("Content-Type", "text/plain")])

    def _answer_wsgi(self, app: WsgiApp, path: str, query: str) -> None:
        """Answer with a WSGI app, the request's headers passed as WSGI's ``HTTP_*`` keys (a GET: no
        body to read)."""
        environ: dict[str, Any] = {
            "REQUEST_METHOD": self.command,
            "SCRIPT_NAME": "",
            "PATH_INFO": path,
            "QUERY_STRING": query,
            "SERVER_NAME": self.server.host,
            "SERVER_PORT": str(self.server.port),
            "SERVER_PROTOCOL": self.request_version,
            "wsgi.version": (1, 0),
            "wsgi.url_scheme": "http",
            "wsgi.input": io.BytesIO(),
            "wsgi.errors": io.StringIO(),
            "wsgi.multithread": True,
            "wsgi.multiprocess": False,
            "wsgi.run_once": False,
        }
        for name, value in self.headers.items():
            key = "HTTP_" + name.upper().replace("-", "_")
            if key not in ("HTTP_CONTENT_TYPE", "HTTP_CONTENT_LENGTH"):
                environ[key] = f"{environ[key]},{value}" if key in environ else value
        started: list[tuple[str, list[tuple[str, str]]]] = []
        chunks: list[bytes] = []

        def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
            started.append((status, headers))
            return chunks.append

        chunks.extend(app(environ, start_response))
        status, headers = started[-1]
        self._answer(int(status.split(" ", 1)[0]), b"".join(chunks), headers)

    def _answer(self, code: int, body: bytes, headers: list[tuple[str, str]]) -> None:
        self.send_response(code)
        for name, value in headers:
            if name.lower() != "content-length":
                self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        """Scrapes every few seconds are not worth a log line each."""
