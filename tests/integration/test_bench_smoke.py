"""``python -m bench.run --quick`` end to end, so the bench keeps working; no timing is asserted."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from urllib.parse import quote

import pytest
from django.db import connection

pytestmark = pytest.mark.slow
"""A whole quick bench (its own database, worker processes): run it with the other slow scenarios."""

REPO_DIR = Path(__file__).resolve().parents[2]


def server_url() -> str:
    """A libpq URL for the server the tests run on (the bench makes its own database there)."""
    conf = connection.settings_dict
    user = quote(conf["USER"] or "", safe="")
    password = f":{quote(conf['PASSWORD'], safe='')}" if conf["PASSWORD"] else ""
    host = conf["HOST"] or ""
    port = f":{conf['PORT']}" if conf["PORT"] else ""
    if host.startswith("/"):
        query = f"?host={quote(host, safe='')}" + (f"&port={conf['PORT']}" if conf["PORT"] else "")
        return f"postgresql://{user}{password}@/postgres{query}"
    return f"postgresql://{user}{password}@{host}{port}/postgres"


def test_quick_bench_runs_every_phase_and_writes_json(tmp_path: Path) -> None:
    env = {**os.environ, "DATABASE_URL": server_url()}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.run",
            "--quick",
            "--database",
            f"{connection.settings_dict['NAME']}_bench_smoke",  # one per test database (xdist worker)
            "--drop",
            "--results-dir",
            str(tmp_path),
        ],
        cwd=REPO_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "synchronous_commit" in result.stdout
    [written] = tmp_path.glob("*.json")
    report = json.loads(written.read_text())
    keys = {figure["key"] for figure in report["figures"]}
    assert {"raw_1_client", "raw_2_clients", "sql_bench_one_1", "sql_bench_one_2"} <= keys
    assert {"drain_bench_one_2", "e2e_bench_chain_1", "drain_bench_map_1", "rss_peak"} <= keys
    assert {"latency_client_p50_ms", "latency_client_p95_ms"} <= keys
    history = {"start_bench_one_history", "drain_bench_one_2_history", "latency_client_p50_ms_history"}
    assert {"start_bench_one", *history} <= keys
    assert report["meta"]["history"]["finished_runs"] == 2000
    assert {target["name"] for target in report["targets"]} >= {
        "start rate with history vs without",
        "1-step drain with history vs without",
        "chain p50 with history vs without",
    }
    assert report["meta"]["server"]["synchronous_commit"] == "on"
    for figure in report["figures"]:
        if figure["key"].startswith("latency_hop_pickup_p50_ms"):
            # a task handed off by the completion that created it is queued and claimed at once
            assert figure["value"] >= 0, figure
            continue
        assert figure["value"] > 0, figure
        if figure["unit"] in {"tasks/s", "msgs/s"}:
            assert figure["ratio_to_raw"] > 0, figure
