"""``pgflow_demo`` (``make demo``) end to end on the test database, with real worker processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator

import pytest
from django.db import connection

from tests import workers
from tests.support.db import scalar


@pytest.fixture
def no_demo_flow(database_url: str) -> Iterator[None]:
    def drop() -> None:
        with connection.cursor() as cursor:
            cursor.execute(
                "select pgflow.delete_flow_and_data(flow_slug) from pgflow.flows "
                "where flow_slug = 'demo_orders'"
            )
            cursor.execute("delete from pgflow.workers where queue_name = 'demo_orders'")

    drop()
    yield
    drop()


@pytest.mark.usefixtures("no_demo_flow")
def test_demo_runs_the_batch_and_stops_its_workers(database_url: str) -> None:
    result = workers.run_manage(
        database_url, "pgflow_demo", "--runs", "30", "--workers", "2", "--concurrency", "4", timeout=120
    )
    assert result.returncode == 0, f"{result.stdout}\n{result.stderr}"
    out = result.stdout
    assert "flow demo_orders: compiled" in out
    assert "2 worker(s) ready" in out
    assert "30 (30 completed, 0 failed)" in out
    assert "retried after a failure" in out
    assert "VIP gifts added" in out
    assert "tasks/s" in out
    assert "stopped 2 worker(s)" in out
    assert "pgflow-django demo" in out and "worker logs" in out
    assert "[bold]" not in out and "[/" not in out, "Rich markup printed as text"
    wide = [line for line in out.splitlines() if len(line) > 80]
    assert wide == [], "the demo's output must fit 80 columns, also when piped"

    assert (
        scalar("select count(*) from pgflow.runs where flow_slug = 'demo_orders' and status = 'completed'")
        == 30
    )
    assert (
        scalar(
            "select count(*) from pgflow.step_tasks where flow_slug = 'demo_orders' and attempts_count > 1"
        )
        > 0
    )
    assert (
        scalar("select count(*) from pgflow.step_states where step_slug = 'add_gift' and status = 'skipped'")
        > 0
    )
    assert scalar("select count(*) from pgflow.workers where queue_name = 'demo_orders'") == 2
    assert (
        scalar("select count(*) from pgflow.workers where queue_name = 'demo_orders' and stopped_at is null")
        == 0
    )


@pytest.mark.usefixtures("no_demo_flow")
def test_sigterm_stops_the_demo_and_the_workers_it_started(database_url: str) -> None:
    demo = subprocess.Popen(
        [sys.executable, str(workers.MANAGE), "pgflow_demo", "--runs", "3000", "--workers", "1"],
        cwd=workers.REPO,
        env={**os.environ, "DATABASE_URL": database_url, "PYTHONUNBUFFERED": "1"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert demo.stdout is not None
    seen = []
    for line in demo.stdout:
        seen.append(line)
        if "worker(s) ready" in line:
            break
    else:
        pytest.fail("".join(seen))
    demo.send_signal(signal.SIGTERM)
    rest, _ = demo.communicate(timeout=60)
    assert demo.returncode == 130, "".join(seen) + rest
    assert "stopped 1 worker(s)" in rest
    assert "CommandError: interrupted; the demo's workers were stopped" in rest
    assert (
        scalar("select count(*) from pgflow.workers where queue_name = 'demo_orders' and stopped_at is null")
        == 0
    )
