"""``python -m bench.provisioning`` with a few flows (enough for the numbered functions), so the figures
of compiling one more flow and starting a worker keep working; no timing is asserted (the bench
itself waits for the worker's registration and its first run's completion)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from django.db import connection

from tests.integration.test_bench_smoke import REPO_DIR, server_url


def test_provisioning_bench_measures_a_compile_and_a_worker_start(tmp_path: Path) -> None:
    env = {**os.environ, "DATABASE_URL": server_url()}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    output = tmp_path / "provisioning.json"
    result = subprocess.run(
        [
            *(sys.executable, "-m", "bench.provisioning", "--flows", "40", "--samples", "1", "--calls", "10"),
            *("--database", f"{connection.settings_dict['NAME']}_bench_provisioning", "--drop"),
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
    assert report["queues"] > 40 and report["functions_holding_branches"] == 257
    assert report["most_branches_in_one_function"] >= 1
    timed = ("compile_one_more_ms", "worker_prepare_ms", "worker_ready_ms", "first_run_ms", "call_us")
    assert all(report[key] > 0 for key in timed)
