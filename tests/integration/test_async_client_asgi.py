"""docs/async.md's async views under a real ASGI server: a uvicorn process serves ``tests/async_views.py``
on the test database, a worker runs the flow in this process, and httpx calls the views as a client
would. The views start runs (in a transaction, for the order) and ``await_run`` them on uvicorn's loop.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from django.db import connection

from pgflow_django import compile_flow, get_run
from testproject.example.models import LedgerEntry
from tests.async_views import quote
from tests.support.db import value
from tests.workers import REPO, InProcessWorker

pytestmark = [
    pytest.mark.django_db(transaction=True),
    # httpx's transport imports trio when it is installed (selenium's dependency), and hypothesis warns
    # about trio's own random generator: nothing of this test
    pytest.mark.filterwarnings("ignore::hypothesis.errors.HypothesisWarning"),
]


@pytest.fixture
def server(database_url: str, tmp_path: Path) -> Iterator[str]:
    """uvicorn on a socket this test bound: a request made before the server is up waits in the
    socket's backlog instead of failing, so nothing polls for readiness."""
    listening = socket.socket()
    listening.bind(("127.0.0.1", 0))
    listening.listen(64)
    log_path = tmp_path / "uvicorn.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "uvicorn",
                "--factory",
                "django.core.asgi:get_asgi_application",
                "--fd",
                str(listening.fileno()),
                "--lifespan",
                "off",
                "--no-access-log",
            ],
            pass_fds=[listening.fileno()],
            cwd=REPO,
            env={
                **os.environ,
                "DATABASE_URL": database_url,
                "DJANGO_SETTINGS_MODULE": "tests.async_settings",
                "PYTHONUNBUFFERED": "1",
            },
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        yield f"http://127.0.0.1:{listening.getsockname()[1]}"
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)
        listening.close()
        print(log_path.read_text(errors="replace"))


@pytest.fixture
def worker(database_url: str) -> Iterator[None]:
    """The worker's own loop, in a thread of this process: the test is about the server."""
    compile_flow(quote)
    running = InProcessWorker(quote, "asgi-test-worker", poll_interval=0.2, ready=False)
    yield
    running.stop()
    with connection.cursor() as cursor:
        cursor.execute("select pgflow.delete_flow_and_data('async_quote')")
        cursor.execute("delete from pgflow.workers where queue_name = 'async_quote'")


def test_async_views_start_runs_and_await_them(server: str, worker: None) -> None:
    with httpx.Client(base_url=server, timeout=20) as client, ThreadPoolExecutor(5) as pool:
        responses = list(  # five requests waiting together on the server's one loop
            pool.map(lambda n: client.get("/quote/", params={"sku": f"Q{n}", "quantity": n}), range(1, 6))
        )
    assert [response.status_code for response in responses] == [200] * 5
    assert [response.json() for response in responses] == [
        {"status": "completed", "quote": {"sku": f"Q{n}", "total": 3 * n}} for n in range(1, 6)
    ]

    placed = httpx.post(f"{server}/orders/", data={"sku": "A1", "quantity": "2"}, timeout=20)
    assert placed.status_code == 200
    assert placed.json()["quote"] == {"sku": "A1", "total": 6}
    assert get_run(placed.json()["run_id"]).status == "completed"
    assert LedgerEntry.objects.filter(flow="orders", key="A1").count() == 1


def test_a_view_whose_transaction_rolls_back_starts_no_run(server: str, worker: None) -> None:
    sku = "X" * 201  # longer than the ledger's key: the order's write fails after the start
    failed = httpx.post(f"{server}/orders/", data={"sku": sku, "quantity": "1"}, timeout=20)
    assert failed.status_code == 500
    assert not LedgerEntry.objects.filter(flow="orders").exists()
    assert value("select count(*) from pgflow.runs where flow_slug = 'async_quote'") == 0
