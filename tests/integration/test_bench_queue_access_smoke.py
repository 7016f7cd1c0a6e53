"""``python -m bench.queue_access`` with small counts, so the static/dynamic comparison keeps working; no
timing is asserted (the bench itself checks that each chain completes through two hand-offs and that
each round has, or lacks, the queue's static branch)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from django.db import connection

from tests.integration.test_bench_smoke import REPO_DIR, server_url


def test_queue_access_bench_runs_both_ways(tmp_path: Path) -> None:
    env = {**os.environ, "DATABASE_URL": server_url()}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    output = tmp_path / "queue_access.json"
    result = subprocess.run(
        [
            *(sys.executable, "-m", "bench.queue_access", "--chains", "3", "--rounds", "1", "--warmup", "1"),
            *("--database", f"{connection.settings_dict['NAME']}_bench_queue_access", "--drop"),
            *("--json", str(output)),
        ],
        cwd=REPO_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    report = json.loads(output.read_text())
    assert [entry["way"] for entry in report["rounds"]] == ["static", "dynamic"]
    assert all(entry["p50_ms"]["chain"] > 0 for entry in report["rounds"])
