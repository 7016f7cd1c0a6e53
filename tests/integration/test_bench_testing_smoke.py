"""``python -m bench.testing`` end to end with one sample, so the toolkit's bench keeps working; no
timing is asserted."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.integration.test_bench_smoke import REPO_DIR, server_url


def test_the_testing_bench_runs() -> None:
    env = {**os.environ, "DATABASE_URL": server_url()}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.testing",
            "--samples",
            "1",
            "--warmup",
            "0",
            "--database",
            "pgflow_bench_testing_smoke",
            "--drop",
        ],
        cwd=REPO_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    lines = [line for line in result.stdout.splitlines() if " median " in line]
    assert len(lines) == 3, result.stdout
