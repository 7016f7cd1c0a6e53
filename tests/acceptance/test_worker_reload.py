"""``pgflow_worker --reload`` on a real process group: a code change stops the worker gracefully
(its registration marked stopped) and a new one starts with the new code; Ctrl-C (SIGINT to the
terminal's process group) drains and exits 0, as without ``--reload``."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.db import connection

from pgflow_django import start_flow
from pgflow_django.flows.compiler import compile_flow
from pgflow_django.flows.registry import get_flow
from testproject.example import flows as example_flows
from tests.sql.support import val
from tests.workers import MANAGE, REPO, clean_example_flows, wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

FAST = ("--poll-interval", "0.2", "--heartbeat-seconds", "0.5")


@pytest.fixture
def cleaned(database_url: str) -> Iterator[str]:
    with connection.cursor() as cursor:
        clean_example_flows(cursor)
    yield database_url
    with connection.cursor() as cursor:
        clean_example_flows(cursor)


def started_ids(log: Path) -> list[str]:
    return re.findall(r"worker ([0-9a-f-]{36}) started", log.read_text())


def test_a_code_change_restarts_the_worker_after_a_graceful_stop(cleaned: str, tmp_path: Path) -> None:
    compile_flow(get_flow("example_chain"))
    log = tmp_path / "worker.log"
    with log.open("wb") as output:
        process = subprocess.Popen(
            [sys.executable, str(MANAGE), "pgflow_worker", "--reload", "--flow", "example_chain", *FAST],
            cwd=REPO,
            env={**os.environ, "DATABASE_URL": cleaned, "PYTHONUNBUFFERED": "1", "PGFLOW_LOG_LEVEL": "INFO"},
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        wait_until(lambda: len(started_ids(log)) == 1, 60, "the first worker to start")
        time.sleep(1.5)  # the reloader's first look records the modules' times
        source = Path(example_flows.__file__)
        os.utime(source)
        wait_until(lambda: len(started_ids(log)) == 2, 60, "the worker to start again after the change")
        first, second = started_ids(log)
        assert first != second
        text = log.read_text()
        assert f"{source} changed: restarting once in-flight tasks finish" in text
        assert val("select stopped_at is not null from pgflow.workers where worker_id = %s", [first])
        run = start_flow(get_flow("example_chain"), {"n": 1})
        wait_until(
            lambda: val("select status from pgflow.runs where run_id = %s", [run]) == "completed",
            30,
            "the restarted worker to run a flow",
        )
        os.killpg(process.pid, signal.SIGINT)  # Ctrl-C in the terminal: parent and child get it
        assert process.wait(30) == 0, log.read_text()
        assert val("select stopped_at is not null from pgflow.workers where worker_id = %s", [second])
        assert "SIGINT: stopped polling" in log.read_text()
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(10)
