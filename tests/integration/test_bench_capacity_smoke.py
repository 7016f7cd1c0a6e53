"""``python -m bench.capacity --quick`` end to end, so the capacity figures stay reproducible; no
timing is asserted, only what does not depend on the machine's load: which sessions a worker opens."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.db import connection

from tests.integration.test_bench_smoke import REPO_DIR, server_url

pytestmark = pytest.mark.slow
"""Worker processes for every scenario: run it with the other slow scenarios."""


def test_the_capacity_bench_prints_every_figure(tmp_path: Path) -> None:
    if (connection.settings_dict["HOST"] or "/").startswith("/"):
        pytest.skip(
            "bench.capacity tells a worker's sessions apart by their TCP client ports; this server is"
            " reached over a Unix socket (the embedded PostgreSQL): run it on a server at host:port"
        )
    env = {**os.environ, "DATABASE_URL": server_url()}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    written = tmp_path / "capacity.json"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.capacity",
            "--quick",
            "--no-pooler",
            "--database",
            f"{connection.settings_dict['NAME']}_bench_capacity",
            "--drop",
            "--json",
            str(written),
        ],
        cwd=REPO_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    for heading in ("connections per worker", "database CPU and WAL per task", "storage per finished run"):
        assert heading in result.stdout, result.stdout
    report = json.loads(written.read_text())
    roles = {c["scenario"]: c["by_role"] for c in report["connections"]}
    engine = {"pgflow_worker supervisor": 1, "pgflow_worker completer": 1}
    assert roles["plain worker"].items() >= {**engine, "pgflow_worker listener": 1}.items(), roles
    assert roles["plain worker, no LISTEN"].items() >= engine.items(), roles
    assert "pgflow_worker listener" not in roles["plain worker, no LISTEN"], roles
    assert {name for name in roles if name.startswith("step-queue worker")} == {
        f"step-queue worker (step {step})" for step in ("first", "second", "third")
    }
    assert [c["flow"] for c in report["costs"]] == ["bench_one", "bench_chain"]
    assert all(c["wal_bytes_per_task"] > 0 and c["tasks"] > 0 for c in report["costs"]), report["costs"]
    stored = {s["flow"]: s for s in report["storage"]}
    assert (
        stored["bench_five"]["compacted_total_per_run"] > stored["bench_one"]["compacted_total_per_run"] > 0
    )
