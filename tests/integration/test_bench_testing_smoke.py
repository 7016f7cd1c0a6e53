"""``python -m bench.testing`` end to end with one sample, so the toolkit's bench keeps working; no
timing is asserted, only round trips, which do not depend on the machine's load."""

from __future__ import annotations

import os
import subprocess
import sys

from django.db import connection

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
            f"{connection.settings_dict['NAME']}_bench_testing",
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
    trips = [int(line.split()[0]) for line in result.stdout.splitlines() if " round trips (" in line]
    assert len(trips) == 3, result.stdout
    # 12 hops (10 steps, 2 retried attempts) would take 24 round trips with a claim and a completion
    # each: the claim after a batch travels with the batch's results
    assert trips[0] == trips[1] < 24, result.stdout
    # drain() of 100 ready runs: one claim of all of them, one completion batch, a few reads
    assert trips[2] < 10, result.stdout
