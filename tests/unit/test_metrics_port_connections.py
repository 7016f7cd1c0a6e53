"""The worker's metrics port under idle and slow clients: they hold no thread, are closed once their
request head is late, and ``/healthz`` and ``/metrics`` keep answering beside them."""

from __future__ import annotations

import itertools
import socket
import threading
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import psutil
import pytest

from pgflow_django import Flow
from pgflow_django.observability.metrics import MetricsServer, WorkerMetrics
from pgflow_django.worker.exporter import probe
from pgflow_django.worker.options import WorkerOptions
from pgflow_django.worker.queue_worker import QueueWorker

READ_TIMEOUT = 0.5
LATE_CLOSE = 3.0
"""How much later than the read timeout a close may be seen: the server's and the client's threads wait
for the CPU on a busy machine. Bytes arrive every 0.05 s, so a deadline that each byte pushed back
would never close the connection (checked by the pauses between them)."""
HANDLER_THREADS = 2
IDLE_CLIENTS = 200

flow = Flow("otest_port_load")


@flow.step()
def only(flow_input: Any) -> Any:
    return flow_input


@pytest.fixture
def server() -> Iterator[MetricsServer]:
    started = MetricsServer(
        WorkerMetrics(),
        probe([QueueWorker(flow, WorkerOptions(heartbeat_seconds=60.0))]),
        0,
        "127.0.0.1",
        read_timeout=READ_TIMEOUT,
        handler_threads=HANDLER_THREADS,
        max_connections=IDLE_CLIENTS + 10,
    )
    started.start()
    yield started
    started.stop()


def get(server: MetricsServer, path: str) -> tuple[int, bytes, float]:
    began = time.monotonic()
    with urllib.request.urlopen(f"http://127.0.0.1:{server.port}{path}", timeout=5) as response:
        return int(response.status), response.read(), time.monotonic() - began


def connect(server: MetricsServer, count: int) -> list[socket.socket]:
    return [socket.create_connection(("127.0.0.1", server.port), timeout=5) for _ in range(count)]


def closed_by_server(sock: socket.socket, within: float) -> bool:
    sock.settimeout(within)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def test_idle_clients_hold_no_thread_and_probes_still_answer(server: MetricsServer) -> None:
    process = psutil.Process()
    threads = process.num_threads()
    idle = connect(server, IDLE_CLIENTS)
    try:
        time.sleep(0.1)  # every connection accepted
        assert process.num_threads() <= threads, "an idle client holds no thread"
        assert sum(t.name.startswith("pgflow-metrics") for t in threading.enumerate()) == 1 + HANDLER_THREADS
        status, body, took = get(server, "/healthz")
        assert (status, body) == (200, b"ok\n") and took < 1.0
        status, body, took = get(server, "/metrics")
        assert status == 200 and b"# TYPE" in body and took < 1.0
        assert process.num_threads() <= threads
        assert all(closed_by_server(sock, READ_TIMEOUT + 1.0) for sock in idle), (
            "a connection without a request head past the read timeout is closed"
        )
    finally:
        for sock in idle:
            sock.close()


def test_a_client_sending_a_byte_at_a_time_is_closed_at_the_read_timeout(server: MetricsServer) -> None:
    """Bytes arrive far more often than the read timeout, yet the connection is closed once the timeout
    has passed since it opened: the deadline is the head's, not a pause's."""
    began = time.monotonic()  # before the connection exists: the server's deadline cannot come earlier
    slow = connect(server, 1)[0]
    sent = [began]
    try:
        for byte in b"GET /healthz HTTP/1.1\r\nHost: x\r\n" * 10:  # never ends its head
            if closed_by_server(slow, 0.05):
                break
            slow.send(bytes([byte]))
            sent.append(time.monotonic())
        else:
            pytest.fail("the slow client was never closed")
        closed = time.monotonic()
        pause = max(later - earlier for earlier, later in itertools.pairwise([*sent, closed]))
        assert pause < READ_TIMEOUT, f"the client paused {pause:.2f}s: a pause's timeout could have closed it"
        assert READ_TIMEOUT <= closed - began < READ_TIMEOUT + LATE_CLOSE
        assert get(server, "/healthz")[:2] == (200, b"ok\n")
    finally:
        slow.close()


def test_past_max_connections_the_oldest_waiting_client_is_closed(server: MetricsServer) -> None:
    clients = connect(server, server.max_connections + 5)
    try:
        assert get(server, "/healthz")[:2] == (200, b"ok\n"), "the newest connection is answered"
        assert all(closed_by_server(sock, 0.5) for sock in clients[:6]), "the oldest made room"
        assert not closed_by_server(clients[-1], 0.05), "the newest still waits for its head"
    finally:
        for sock in clients:
            sock.close()
