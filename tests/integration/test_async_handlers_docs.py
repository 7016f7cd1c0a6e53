"""docs/async.md's async handlers and deadlines, run by a real worker (in this process: real
threads, real connections) against a real HTTP server, and the page's blocks checked against
``tests/async_handlers.py``, where they are defined."""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from pgflow_django import compile_flow, start_flow, wait_for_run
from testproject.example.models import LedgerEntry
from tests import async_handlers
from tests.support.db import tuples
from tests.workers import InProcessWorker

pytestmark = pytest.mark.django_db(transaction=True)

DOC = Path(__file__).resolve().parents[2] / "docs" / "async.md"
SOURCE = Path(async_handlers.__file__)
RATES = {"EUR": 1.08, "GBP": 1.27, "JPY": 0.0067}


class RatesApi(BaseHTTPRequestHandler):
    """``GET /rates/<code>``, answered after 0.3 s: how many requests it held at once is counted."""

    lock = threading.Lock()
    active = 0
    most = 0

    def do_GET(self) -> None:
        code = self.path.rsplit("/", 1)[-1]
        with RatesApi.lock:
            RatesApi.active += 1
            RatesApi.most = max(RatesApi.most, RatesApi.active)
        try:
            time.sleep(0.3)
        finally:
            with RatesApi.lock:
                RatesApi.active -= 1
        if code not in RATES:
            self.send_error(404)
            return
        body = json.dumps({"code": code, "value": RATES[code]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        return None


@pytest.fixture
def rates_api(settings: Any) -> Iterator[None]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), RatesApi)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    settings.RATES_API_URL = f"http://127.0.0.1:{server.server_address[1]}"
    RatesApi.most = 0
    yield
    server.shutdown()
    server.server_close()


def run_worker(flow: Any) -> InProcessWorker:
    compile_flow(flow, on_change="replace")
    return InProcessWorker(flow, async_concurrency=10)


def stop(worker: InProcessWorker, slug: str) -> None:
    worker.stop()
    tuples("select pgflow.delete_flow_and_data(%s)", [slug])


def test_the_rates_flow_fetches_side_by_side_then_saves_with_the_async_orm(rates_api: None) -> None:
    worker = run_worker(async_handlers.rates)
    try:
        run = wait_for_run(start_flow(async_handlers.rates, ["EUR", "GBP", "JPY"]), timeout=30)
        assert run.status == "completed", run.error_message
        assert run.outputs["fetch_rate"] == [{"code": code, "value": RATES[code]} for code in RATES]
        assert run.outputs["save_rates"] == 3
        assert RatesApi.most == 3, "the three requests were in flight together"
        keys = set(LedgerEntry.objects.filter(flow="rates").values_list("key", flat=True))
        assert keys == {f"{code}={value}" for code, value in RATES.items()}
    finally:
        stop(worker, async_handlers.rates.slug)


def test_render_pages_checks_its_deadline(rates_api: None) -> None:
    worker = run_worker(async_handlers.reports)
    try:
        done = wait_for_run(start_flow(async_handlers.reports, {"pages": 3}), timeout=30)
        assert done.outputs == {"render_pages": {"pages": 3}}
        endless = wait_for_run(start_flow(async_handlers.reports, {"pages": 10**12}), timeout=30)
        assert endless.status == "failed"
        assert endless.step("render_pages").error_message == (
            "TaskTimeout: step 'render_pages' passed its timeout of 2s"
        )
    finally:
        stop(worker, async_handlers.reports.slug)


def test_the_pages_handler_blocks_are_the_ones_tested() -> None:
    text = DOC.read_text(encoding="utf-8")
    section = text[text.index("## Async handlers") :]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert len(blocks) == 2
    source = SOURCE.read_text(encoding="utf-8")
    for block in blocks:
        for line in block.splitlines():
            assert line in source, f"docs/async.md shows a line tests/async_handlers.py lacks: {line!r}"
