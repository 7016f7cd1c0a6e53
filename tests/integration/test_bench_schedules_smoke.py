"""``python -m bench.schedules`` with small counts, so the schedules bench keeps working; no timing
is asserted (the bench itself checks that each call fired exactly the due ticks)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from django.db import connection

from tests.integration.test_bench_smoke import REPO_DIR, server_url


def test_schedules_bench_fires_the_due_ticks_of_every_round(tmp_path: Path) -> None:
    env = {**os.environ, "DATABASE_URL": server_url()}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    output = tmp_path / "schedules.json"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.schedules",
            "--schedules",
            "300",
            "--due",
            "10",
            "--rounds",
            "4",
            "--database",
            f"{connection.settings_dict['NAME']}_bench_schedules",
            "--drop",
            "--json",
            str(output),
        ],
        cwd=REPO_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    report = json.loads(output.read_text())
    assert report["schedules"] == 300 and report["due_per_call"] == 10 and report["rounds"] == 4
    assert report["idle_fired"] == 0
    assert report["broken"] == 100 and report["plan_later_median_ms"] > 0
