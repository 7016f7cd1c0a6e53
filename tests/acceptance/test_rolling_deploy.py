"""A rolling deploy with real worker processes (docs/upgrading.md, "Deploying a changed flow").

Release 1 of a flow has runs in flight on a release-1 worker. Release 2 adds a step: its release step
(``pgflow_compile``) adds version 2, a release-2 worker starts, and both releases' code keeps starting
runs. Every run finishes on the version it started on, run by the worker with that version's code,
each task once (the handlers' execution ledger) and each message read once; the release-1 worker is
stopped after its drain. Then a release-1 run is left with no release-1 worker, and the health check
names it. The same sequence runs through one shared queue that carries both versions."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.db import connection

from pgflow_django import Flow, compile_flow, start_flows
from pgflow_django.runs.client import cancel_run
from tests.ledger import install_ledger
from tests.sql.support import q, val
from tests.versions_flows import SHARED_QUEUE, release, routed_release
from tests.workers import WorkerProcess, drop_shared_queues, run_manage, wait_until

pytestmark = pytest.mark.slow

FAST = ("--poll-interval", "0.1", "--max-poll-seconds", "0.3", "--heartbeat-seconds", "0.5")
SLUGS = ("deploy", "deploy_routed")
IN_FLIGHT, LATER = 30, 10


def _clean() -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            "select pgflow.delete_flow_and_data(f.flow_slug) from pgflow.flows as f"
            " where f.version_of = any(%s) order by f.version_number desc",
            [list(SLUGS)],
        )
        drop_shared_queues(cursor, [SHARED_QUEUE])
        install_ledger(cursor)
        cursor.execute("delete from public.ledger_execution where flow_slug like 'deploy%%'")


@pytest.fixture
def clean(database_url: str) -> Iterator[str]:
    _clean()
    yield database_url
    _clean()


def _worker(
    url: str, number: int, slug: str, routed: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> WorkerProcess:
    monkeypatch.setenv("DJANGO_SETTINGS_MODULE", "tests.versions_settings")
    monkeypatch.setenv("PGFLOW_TEST_RELEASE", str(number))
    monkeypatch.setenv("PGFLOW_TEST_STEP_SECONDS", "0.05")
    args = ["--queue", SHARED_QUEUE, *FAST] if routed else list(FAST)
    return WorkerProcess(url, slug, args, tmp_path / f"release{number}.log").wait_ready(90)


def _code(number: int, slug: str, routed: bool) -> Flow:
    return routed_release(number, slug) if routed else release(number, slug)


def _statuses(run_ids: list[object]) -> dict[str, int]:
    found = q(
        "select status, count(*) as n from pgflow.runs where run_id = any(%s::uuid[]) group by 1", [run_ids]
    )
    return {row["status"]: row["n"] for row in found}


@pytest.mark.parametrize("routed", [False, True], ids=["own-queues", "shared-queue"])
def test_a_rolling_deploy_finishes_every_run_on_its_version(
    clean: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, routed: bool
) -> None:
    slug = "deploy_routed" if routed else "deploy"
    v2_slug = f"{slug}___v2"
    v1_code, v2_code = _code(1, slug, routed), _code(2, slug, routed)
    assert compile_flow(v1_code).flow_slug == slug
    v1_runs = start_flows(v1_code, [{"i": i} for i in range(IN_FLIGHT)])
    old = _worker(clean, 1, slug, routed, tmp_path, monkeypatch)
    new: WorkerProcess | None = None
    try:
        wait_until(
            lambda: _statuses(v1_runs).get("completed", 0) >= 1, 30, "the release-1 worker to finish a run"
        )
        assert _statuses(v1_runs).get("started", 0) > 0, "release 1 must still have runs in flight"

        release_step = run_manage(
            clean,
            "pgflow_compile",
            slug,
            env={"DJANGO_SETTINGS_MODULE": "tests.versions_settings", "PGFLOW_TEST_RELEASE": "2"},
        )
        assert release_step.returncode == 0, release_step.stderr
        assert release_step.stdout.split() == ["new", "version", v2_slug]
        v2_runs = start_flows(v2_code, [{"i": i} for i in range(IN_FLIGHT)])
        new = _worker(clean, 2, slug, routed, tmp_path, monkeypatch)
        v1_runs += start_flows(v1_code, [{"late": i} for i in range(LATER)])  # old web processes still start
        v2_runs += start_flows(slug, [{"by_name": i} for i in range(LATER)])  # by name: the newest version

        every = v1_runs + v2_runs
        wait_until(lambda: _statuses(every) == {"completed": len(every)}, 90, "every run to complete")

        assert {
            r["flow_slug"]
            for r in q("select flow_slug from pgflow.runs where run_id = any(%s::uuid[])", [v1_runs])
        } == {slug}
        assert {
            r["flow_slug"]
            for r in q("select flow_slug from pgflow.runs where run_id = any(%s::uuid[])", [v2_runs])
        } == {v2_slug}
        steps = q(
            "select r.flow_slug, t.step_slug, t.last_worker_id::text as worker, count(*) as n,"
            " max(t.attempts_count) as attempts"
            " from pgflow.step_tasks as t join pgflow.runs as r using (run_id)"
            " where r.run_id = any(%s::uuid[]) group by 1, 2, 3 order by 1, 2, 3",
            [every],
        )
        assert steps == [
            {
                "flow_slug": slug,
                "step_slug": "first",
                "worker": old.worker_id,
                "n": len(v1_runs),
                "attempts": 1,
            },
            {
                "flow_slug": slug,
                "step_slug": "second",
                "worker": old.worker_id,
                "n": len(v1_runs),
                "attempts": 1,
            },
            {
                "flow_slug": v2_slug,
                "step_slug": "audit",
                "worker": new.worker_id,
                "n": len(v2_runs),
                "attempts": 1,
            },
            {
                "flow_slug": v2_slug,
                "step_slug": "first",
                "worker": new.worker_id,
                "n": len(v2_runs),
                "attempts": 1,
            },
            {
                "flow_slug": v2_slug,
                "step_slug": "second",
                "worker": new.worker_id,
                "n": len(v2_runs),
                "attempts": 1,
            },
        ]
        executions = q(
            "select run_id, step_slug, count(*) as n from public.ledger_execution"
            " where run_id = any(%s::uuid[]) group by 1, 2 having count(*) <> 1",
            [every],
        )
        assert executions == [], "each task ran exactly once"
        assert val(
            "select count(*) from public.ledger_execution where run_id = any(%s::uuid[])", [every]
        ) == (2 * len(v1_runs) + 3 * len(v2_runs))
        queues = [SHARED_QUEUE] if routed else [slug, v2_slug]
        for queue in queues:
            assert val(f"select coalesce(max(read_ct), 0) from pgmq.a_{queue}") == 1, "no message read twice"
            assert val(f"select count(*) from pgmq.q_{queue}") == 0

        versions = json.loads(run_manage(clean, "pgflow_versions", slug, "--format", "json").stdout)
        assert [(v["flow_slug"], v["state"]) for v in versions] == [(slug, "drained"), (v2_slug, "newest")]

        old.terminate()
        assert old.wait(30) == 0, old.log()
        assert "Traceback" not in old.log() and "not run by this worker" not in old.log(), old.log()

        (stranded,) = start_flows(v1_code, [{"stranded": True}])
        health = run_manage(clean, "pgflow_health", "--flow", slug)
        assert health.returncode == 1
        assert (
            f"flow {slug}: no live worker runs step first of an earlier version ({slug}), which has 1 "
            "unfinished run(s)" in health.stderr
        ), health.stderr
        versions = json.loads(run_manage(clean, "pgflow_versions", slug, "--format", "json").stdout)
        assert [(v["flow_slug"], v["state"], v["live_workers"]) for v in versions] == [
            (slug, "serving", 0),
            (v2_slug, "newest", 1),
        ]
        cancel_run(stranded)
        assert run_manage(clean, "pgflow_health", "--flow", slug).returncode == 0
    finally:
        for worker in (old, new):
            if worker is not None:
                worker.stop()
