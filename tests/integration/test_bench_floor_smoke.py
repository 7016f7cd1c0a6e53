"""``python -m bench.run --quick --only-floor``, so the floor reference keeps working; no timing is asserted
(the figures of a quick run mean little: only that each is there and positive)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from django.db import connection

from tests.integration.test_bench_smoke import REPO_DIR, server_url

PER_SIDE = ("chain_p50_ms", "chain_p95_ms", "wal_records_per_task", "wal_bytes_per_task")


def test_floor_reference_runs_beside_the_engine(tmp_path: Path) -> None:
    env = {**os.environ, "DATABASE_URL": server_url()}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    result = subprocess.run(
        [
            *(sys.executable, "-m", "bench.run", "--quick", "--only-floor", "--drop"),
            *("--database", f"{connection.settings_dict['NAME']}_bench_floor"),
            *("--results-dir", str(tmp_path)),
        ],
        cwd=REPO_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    [written] = tmp_path.glob("*.json")
    report = json.loads(written.read_text())
    figures = {figure["key"]: figure for figure in report["figures"]}
    expected = {f"{side}_{name}" for side in ("floor", "floor_engine") for name in PER_SIDE}
    expected |= {"floor_raw_wal_records_per_message", "floor_engine_one_wal_records_per_task"}
    expected |= {"floor_ratio_chain_p50", "floor_ratio_chain_p95", "floor_ratio_wal_records"}
    assert expected <= figures.keys(), sorted(figures)
    assert not any(key.startswith(("drain_", "sql_", "e2e_")) for key in figures), "only the floor's phases"
    assert all(figure["value"] > 0 for figure in figures.values())
    assert figures["floor_chain_p50_ms"]["detail"]["synchronous_commit"] == "on"
    sides = report["hop_profile"]["sides"]
    assert set(sides) == {"floor", "engine (chain SQL replayed)"}
    assert sides["floor"]["statements_sent_per_chain"] == 4
    assert sides["floor"]["rows_inserted_per_chain"] > 0
    assert all(side["wal_records_per_item"] > 0 for side in sides.values())
    assert {t["name"] for t in report["targets"]} >= {"chain p50 vs the floor's", "chain p95 vs the floor's"}
