"""Flow versions on two connections (docs/upgrading.md, "Deploying a changed flow"): one transaction
held open while the other runs, and each run lands on exactly one version, or is refused.

- two releases compiling the same new definition: the second waits on the flow's compile lock, then
  finds the version the first added (one version, not two);
- a start by name while a new version's compile is uncommitted takes the version it can see; a start
  by the old code's version keeps the old version after the new one commits;
- a start of a version while that version is deleted waits for the deletion, then is refused: no run
  of a deleted version, nothing left behind;
- an old-code worker and a new-code worker claiming one shared queue: each reads only its version's
  messages, and the other's stay unread for their worker (nor do they make it poll again at once);
- a retry of a failed run of a version being deleted: the deletion's count of unfinished runs locks
  them, so it waits for the retry and refuses, or the retry waits and then finds the run gone.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import psycopg
import pytest

from pgflow_django import Flow, route_flow
from pgflow_django.db.connect import connection_params
from pgflow_django.worker.connection import Engine
from tests.sql.interleavings.support import (
    Background,
    Conn,
    backend_pid,
    check_invariants,
    sessions,
    wait_for_lock_wait,
)
from tests.workers import drop_shared_queues

FLOW = "ilv_versions"


def release(number: int, slug: str = FLOW) -> Flow:
    flow = Flow(slug, timeout=30)
    flow.step(slug="first")(lambda run_input: run_input)
    if number >= 2:
        flow.step(slug="second", depends_on=["first"])(lambda deps: deps)
    return flow


def _compile(conn: Conn, flow: Flow) -> dict[str, Any]:
    row = conn.execute(
        "select pgflow.compile_flow_version(%s, %s::jsonb, %s, 'version')",
        [flow.version_of, json.dumps(flow.shape()), flow.version_key],
    ).fetchone()
    assert row is not None
    return dict(row[0])


def _start(conn: Conn, flow: Flow | str) -> uuid.UUID:
    slug, version = (flow, None) if isinstance(flow, str) else (flow.version_of, flow.version_key)
    row = conn.execute(
        "select run_id from pgflow.start_flow(coalesce(pgflow.flow_version(%s, %s), %s), '{}'::jsonb)",
        [slug, version, slug],
    ).fetchone()
    assert row is not None
    return uuid.UUID(str(row[0]))


def _stored(conn: Conn, run_id: uuid.UUID) -> str:
    row = conn.execute("select flow_slug from pgflow.runs where run_id = %s", [run_id]).fetchone()
    assert row is not None
    return str(row[0])


def _versions(conn: Conn) -> list[str]:
    rows = conn.execute(
        "select flow_slug from pgflow.flows where version_of = %s order by version_number", [FLOW]
    ).fetchall()
    return [str(row[0]) for row in rows]


def test_two_releases_compiling_one_new_definition_add_one_version() -> None:
    with sessions(FLOW) as (first, second, observer):
        _compile(observer, release(1))
        with first.transaction():
            assert _compile(first, release(2))["status"] == "versioned"
            job = Background(lambda: _compile(second, release(2)))
            assert wait_for_lock_wait(observer, backend_pid(second), job) == "advisory"
        answer = job.result()
        assert (answer["status"], answer["flow_slug"]) == ("verified", f"{FLOW}___v2")
        assert _versions(observer) == [FLOW, f"{FLOW}___v2"]
        check_invariants(observer, require_terminal=True)


def test_a_start_takes_the_version_it_can_see() -> None:
    with sessions(FLOW) as (compiler, starter, observer):
        _compile(observer, release(1))
        with compiler.transaction():
            _compile(compiler, release(2))
            before = _start(starter, FLOW)  # by name: the newest committed version
        after = _start(starter, FLOW)
        pinned = _start(starter, release(1))  # the old code names its own version
        assert (_stored(observer, before), _stored(observer, after), _stored(observer, pinned)) == (
            FLOW,
            f"{FLOW}___v2",
            FLOW,
        )
        check_invariants(observer)


def test_a_start_of_a_version_being_deleted_waits_and_is_refused() -> None:
    with sessions(FLOW) as (deleter, starter, observer):
        _compile(observer, release(1))
        _compile(observer, release(2))
        with deleter.transaction():
            deleter.execute("select pgflow.delete_flow_and_data(%s)", [FLOW])
            job = Background(lambda: _start(starter, release(1)))
            assert wait_for_lock_wait(observer, backend_pid(starter), job) == "advisory"
        with pytest.raises(psycopg.errors.InvalidParameterValue, match=f"flow '{FLOW}' does not exist"):
            job.result()
        assert _versions(observer) == [f"{FLOW}___v2"]
        assert observer.execute(
            "select count(*) from pgflow.runs where flow_slug = %s", [FLOW]
        ).fetchone() == (0,)
        check_invariants(observer)


SHARED = "ilv_versions_jobs"


def test_old_and_new_workers_on_one_shared_queue_read_only_their_version() -> None:
    with sessions(FLOW) as (_, _second, observer):
        old_code = route_flow(release(1), queues={"first": SHARED})
        new_code = route_flow(release(2), queues={"first": SHARED, "second": SHARED})
        old_slug, new_slug = (
            _compile(observer, old_code)["flow_slug"],
            _compile(observer, new_code)["flow_slug"],
        )
        old_runs = [_start(observer, old_code) for _ in range(4)]
        new_runs = [_start(observer, new_code) for _ in range(4)]
        table = f"q_{SHARED}"
        old_worker, new_worker = Engine(connection_params(), "old"), Engine(connection_params(), "new")
        try:
            old_support = tuple(old_worker.shared_support(SHARED, [old_slug]))
            new_support = tuple(new_worker.shared_support(SHARED, [new_slug]))
            old_claim = old_worker.claim(
                old_slug, SHARED, table, uuid.uuid4(), vt=30, qty=20, shared_support=old_support
            )
            new_claim = new_worker.claim(
                new_slug, SHARED, table, uuid.uuid4(), vt=30, qty=20, shared_support=new_support
            )
        finally:
            old_worker.close()
            new_worker.close()
        assert (old_claim.read_count, new_claim.read_count) == (4, 4)
        assert {task.run_id for task in old_claim.tasks} == set(old_runs)
        assert {task.run_id for task in new_claim.tasks} == set(new_runs)
        assert old_claim.unclaimed == {} and new_claim.unclaimed == {}
        assert old_claim.next_visible is None, (
            "the other version's visible messages do not make it poll again"
        )
        reads = observer.execute(f"select max(read_ct), count(*) from pgmq.{table}").fetchone()
        assert reads == (1, 8), "every message read once, by the worker of its version"
        observer.execute(
            "select pgflow.delete_flow_and_data(flow_slug) from pgflow.flows where version_of = %s"
            " order by version_number desc",
            [FLOW],
        )
        with observer.cursor() as cursor:
            drop_shared_queues(cursor, [SHARED])


def test_a_deletion_counts_a_retry_that_commits_first() -> None:
    from pgflow_django.runs import queries as run_queries

    with sessions(FLOW) as (retrier, deleter, observer):
        _compile(observer, release(1))
        run_id = _start(observer, release(1))
        observer.execute("select pgflow.cancel_run(%s)", [run_id])
        _compile(observer, release(2))
        count = run_queries.LOCK_VERSION_RUNS.text
        with retrier.transaction():
            retrier.execute("select pgflow.retry_run(%s)", [run_id])
            job = Background(lambda: deleter.execute(count, [FLOW]).fetchone())
            assert wait_for_lock_wait(observer, backend_pid(deleter), job) in {"transactionid", "tuple"}
        assert job.result() == (1,), "the retried run is unfinished: the version is not deleted"
        check_invariants(observer)
