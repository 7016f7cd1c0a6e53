"""Concurrency keys and rate limits under real concurrent workers (issue 22, items 2 and 3).

Four ``pgflow_worker`` processes share 2,000 tasks over 20 keys, one of them hot with 90% of the
backlog. The ledger is the database's own claim and completion times (``started_at``,
``completed_at``) and each handler's wall-clock start and end (its output): no key ever has more
than ``LIMIT`` tasks started at once in either, every task runs exactly once, and a cold key that
arrives behind the hot backlog (once that backlog has been read) finishes its work no more than one of
its handlers' duration later than the same work alone on the same workers. The rate scenario counts
the tokens the limiter grants per window, at its own decision times, and checks each start follows one.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime
from itertools import pairwise
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests import limits_flows
from tests.acceptance.faults import FAST
from tests.workers import Spawner, WorkerProcess, wait_until

pytestmark = pytest.mark.slow

WORKERS, CONCURRENCY = 4, 20
KEYS, TASKS, HOT_SHARE = 20, 2000, 0.9
HOT_MS, COLD_MS = 5, 250
"""Handler durations: the hot key's tasks are short (its backlog drains in seconds); a cold task's
duration is the bound on how long a cold key may wait with a free slot."""
SETTINGS = "tests.limits_settings"


class LimitSpawner(Spawner):
    def __call__(self, flow: str, *args: str, ready: bool = True) -> WorkerProcess:
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("DJANGO_SETTINGS_MODULE", SETTINGS)
            return super().__call__(flow, *args, ready=ready)


@pytest.fixture
def db(database_url: str) -> Iterator[psycopg.Connection[Any]]:
    conn = psycopg.connect(database_url, autocommit=True)
    flows = [limits_flows.KEYED_FLOW, limits_flows.RATED_FLOW]
    drop = "select pgflow.delete_flow_and_data(flow_slug) from pgflow.flows where flow_slug = any(%s)"
    conn.execute(drop, [flows])
    yield conn
    conn.execute(drop, [flows])
    conn.close()


@pytest.fixture
def spawn(database_url: str, db: psycopg.Connection[Any], tmp_path: Path) -> Iterator[LimitSpawner]:
    spawner = LimitSpawner(database_url, tmp_path)
    yield spawner
    spawner.stop_all()


def _start_all(spawn: LimitSpawner, flow: str, concurrency: int) -> list[WorkerProcess]:
    started = [spawn(flow, "--concurrency", str(concurrency), *FAST, ready=False) for _ in range(WORKERS)]
    return [worker.wait_ready(60) for worker in started]


def _start(db: psycopg.Connection[Any], flow: str, inputs: list[dict[str, Any]]) -> None:
    db.execute("select pgflow.start_flows(%s, %s::jsonb)", [flow, json.dumps(inputs)])


def _wait_done(db: psycopg.Connection[Any], flow: str, timeout: float) -> None:
    def done() -> bool:
        row = db.execute(
            "select count(*) from pgflow.runs where flow_slug = %s and status = 'started'", [flow]
        ).fetchone()
        return row is not None and row[0] == 0

    wait_until(done, timeout, f"every run of {flow} to finish", 0.25)


def _now(db: psycopg.Connection[Any]) -> datetime:
    row = db.execute("select clock_timestamp()").fetchone()
    assert row is not None
    return row[0]  # type: ignore[no-any-return]


def _makespan(db: psycopg.Connection[Any], flow: str, phase: str, since: datetime) -> float:
    """Seconds from ``since`` until the last task of that phase's runs completed."""
    row = db.execute(
        "select extract(epoch from max(t.completed_at) - %s)::float8 from pgflow.step_tasks as t"
        " join pgflow.runs as r using (run_id) where t.flow_slug = %s and r.input ->> 'phase' = %s",
        [since, flow, phase],
    ).fetchone()
    assert row is not None and row[0] is not None
    return float(row[0])


def _unread_hot(db: psycopg.Connection[Any]) -> int:
    """Hot tasks still queued that no claim has deferred yet."""
    row = db.execute(
        "select count(*) from pgflow.step_tasks as t join pgflow.runs as r using (run_id)"
        " where t.flow_slug = %s and r.input ->> 'key' = 'hot' and t.status = 'queued'"
        " and not exists (select 1 from pgflow.limit_waits as w where w.run_id = t.run_id)",
        [limits_flows.KEYED_FLOW],
    ).fetchone()
    return int(row[0]) if row else 0


def max_overlap(intervals: list[tuple[Any, Any]]) -> int:
    """The most intervals open at one instant (an interval ending when another starts does not overlap)."""
    events = sorted([(end, -1) for _, end in intervals] + [(start, 1) for start, _ in intervals])
    most = running = 0
    for _, step in events:
        running += step
        most = max(most, running)
    return most


def unused_key_slots(tasks: list[tuple[Any, Any, Any]], limit: int) -> list[tuple[Any, float]]:
    """When, and for how long, one key had a task waiting (queued, not yet started) while fewer than
    ``limit`` of its tasks were started: a free slot of the key unused, whatever the reason (claim
    latency, a deferral that outlived the slot, and the completion's own time to commit, since
    ``completed_at`` is written before it). Each task is (queued_at, started_at, completed_at)."""
    events = sorted(
        [(queued, 1, 0) for queued, _, _ in tasks]
        + [(started, -1, 1) for _, started, _ in tasks]
        + [(completed, 0, -1) for _, _, completed in tasks]
    )
    waiting = running = 0
    unused: list[tuple[Any, float]] = []
    for (at, waits, runs), (following, *_) in pairwise([*events, events[-1]]):
        waiting += waits
        running += runs
        if waiting > 0 and running < limit and following > at:
            unused.append((at, (following - at).total_seconds()))
    return unused


def _behind_a_hot_backlog(
    db: psycopg.Connection[Any], cold: list[dict[str, Any]], phase: str, alone: float
) -> tuple[float, str]:
    """The cold work again, arriving behind a hot backlog that fills its slots and has been read and
    deferred once (until then new messages wait behind it in any FIFO queue): its makespan, and the
    profile of the cold keys' unused slots."""
    flow, limit = limits_flows.KEYED_FLOW, limits_flows.LIMIT
    _start(db, flow, [{"key": "hot", "ms": HOT_MS}] * int(TASKS * HOT_SHARE))
    wait_until(lambda: _unread_hot(db) == 0, 60, "the hot backlog to be read and deferred")
    _start(db, flow, [{**item, "phase": phase} for item in cold])
    arrived = _now(db)
    _wait_done(db, flow, 300)
    behind = _makespan(db, flow, phase, arrived)
    behind_tasks: dict[str, list[tuple[Any, Any, Any]]] = {}
    for key, queued, started, completed in db.execute(
        "select r.input ->> 'key', t.queued_at, t.started_at, t.completed_at from pgflow.step_tasks as t"
        " join pgflow.runs as r using (run_id) where t.flow_slug = %s and r.input ->> 'phase' = %s",
        [flow, phase],
    ).fetchall():
        behind_tasks.setdefault(key, []).append((queued, started, completed))
    unused = {key: unused_key_slots(tasks, limit) for key, tasks in sorted(behind_tasks.items())}
    longest = sorted(
        (
            (seconds, key, (at - arrived).total_seconds())
            for key, gaps in unused.items()
            for at, seconds in gaps
        ),
        reverse=True,
    )[:8]
    profile = (
        f"{phase}: cold work alone {alone:.2f} s, behind the hot backlog {behind:.2f} s; unused key slots "
        f"(s per key): {', '.join(f'{key} {sum(s for _, s in gaps):.2f}' for key, gaps in unused.items())}; "
        f"longest (s, key, at s after arrival): "
        + ", ".join(f"{seconds:.2f} {key} @{at:.2f}" for seconds, key, at in longest)
    )
    print(profile)
    return behind, profile


def test_no_key_ever_runs_more_than_its_limit_and_a_hot_key_does_not_hold_up_a_cold_one(
    spawn: LimitSpawner, db: psycopg.Connection[Any]
) -> None:
    """The delay bound is a wall-clock comparison on a shared machine: a stall of the whole machine
    during the cold work (the other suite's bulk load, a checkpoint) delays every key at once, the
    hot backlog or not. So a first measurement past the bound is taken again behind a new hot
    backlog; a scheduling fault (cold keys waiting behind the hot ones) fails both."""
    flow, limit = limits_flows.KEYED_FLOW, limits_flows.LIMIT
    hot = int(TASKS * HOT_SHARE)
    cold_keys = [f"cold-{n:02d}" for n in range(KEYS - 1)]
    cold = [{"key": cold_keys[n % len(cold_keys)], "ms": COLD_MS} for n in range(TASKS - hot)]
    workers = _start_all(spawn, flow, CONCURRENCY)
    # the same cold work alone first: how long these workers take for it without the hot key
    started = _now(db)
    _start(db, flow, [{**item, "phase": "alone"} for item in cold])
    _wait_done(db, flow, 60)
    alone = _makespan(db, flow, "alone", started)
    rounds = 0
    for phase in ("behind", "behind again"):
        rounds += 1
        behind, profile = _behind_a_hot_backlog(db, cold, phase, alone)
        if behind <= alone + COLD_MS / 1000:
            break

    rows = db.execute(
        "select r.input ->> 'key', t.status, t.attempts_count, t.queued_at, t.started_at, t.completed_at,"
        " t.output from pgflow.step_tasks as t join pgflow.runs as r using (run_id) where t.flow_slug = %s",
        [flow],
    ).fetchall()
    assert len(rows) == len(cold) + rounds * TASKS, "no task lost"
    assert {(status, attempts) for _, status, attempts, *_ in rows} == {("completed", 1)}, (
        "every task ran once: no deferral spent an attempt, none ran twice"
    )
    by_key: dict[str, list[tuple[Any, ...]]] = {}
    for key, _, _, queued, started, completed, output in rows:
        by_key.setdefault(key, []).append((queued, started, completed, output["t0"], output["t1"]))
    assert len(by_key) == KEYS
    assert behind <= alone + COLD_MS / 1000, (
        f"the hot backlog delayed the cold keys' work by {behind - alone:.2f} s, more than one handler; "
        + profile
    )
    claimed = {key: max_overlap([(s, c) for _, s, c, _, _ in tasks]) for key, tasks in by_key.items()}
    handled = {key: max_overlap([(t0, t1) for *_, t0, t1 in tasks]) for key, tasks in by_key.items()}
    assert max(claimed.values()) <= limit, f"started at once per key (database): {claimed}"
    assert max(handled.values()) <= limit, f"running at once per key (handlers): {handled}"
    assert claimed["hot"] == limit, "the hot key used its slots"
    for worker in workers:
        assert worker.process.poll() is None, worker.log()[-3000:]


@pytest.fixture
def grants(db: psycopg.Connection[Any]) -> Iterator[None]:
    """Logs every token a rate bucket grants, at the limiter's own decision time (the bucket's
    granted_at: with burst 1 a claim spends at most one token of a key, so each change is one grant)."""
    db.execute(
        "create table public.test_rate_grants (flow_slug text, key text, granted_at timestamptz);"
        " create function public.test_log_rate_grant() returns trigger language plpgsql as $$ begin"
        " insert into public.test_rate_grants values (new.flow_slug, new.key, new.granted_at); return null;"
        " end $$;"
        " create trigger test_log_rate_grant after update of granted_at on pgflow.limit_slots for each row"
        " when (new.kind = 'rate' and new.granted_at is distinct from old.granted_at)"
        " execute function public.test_log_rate_grant()"
    )
    yield
    db.execute(
        "drop trigger test_log_rate_grant on pgflow.limit_slots;"
        " drop function public.test_log_rate_grant(); drop table public.test_rate_grants"
    )


@pytest.mark.usefixtures("grants")
def test_a_rate_limit_per_key_holds_across_workers(spawn: LimitSpawner, db: psycopg.Connection[Any]) -> None:
    flow = limits_flows.RATED_FLOW
    per_key, per_second = 25, 10
    _start_all(spawn, flow, 4)
    _start(db, flow, [{"key": key} for key in ("a", "b") for _ in range(per_key)])
    _wait_done(db, flow, 60)
    rows = db.execute(
        "select r.input ->> 'key', t.attempts_count, t.started_at from pgflow.step_tasks as t"
        " join pgflow.runs as r using (run_id) where t.flow_slug = %s and t.status = 'completed'",
        [flow],
    ).fetchall()
    assert len(rows) == 2 * per_key and {attempts for _, attempts, _ in rows} == {1}
    granted = db.execute("select key, granted_at from public.test_rate_grants where flow_slug = %s", [flow])
    log = granted.fetchall()
    for key in ("a", "b"):
        starts = sorted(started.timestamp() for k, _, started in rows if k == key)
        # The windows are counted on the limiter's decisions, not on started_at: a claim stamps
        # started_at a little after it decided (more on a loaded machine), so two starts can be
        # closer than the tokens they spent, and a window of starts held one more than the bucket
        # allows with an exact limiter.
        grants = sorted(at.timestamp() for k, at in log if k == key)
        assert len(grants) >= per_key, f"key {key}: {len(grants)} tokens granted for {per_key} starts"
        # the i-th start follows the i-th grant when each start spent a token of its own before it
        early = [s for g, s in zip(grants, starts, strict=False) if s < g]
        assert early == [], f"key {key}: a task started without a token"
        # burst 1, 10 tokens a second: at most 1 + 10 * w grants in any window of w seconds
        for window in (0.5, 1.0, 2.0):
            most = max(sum(1 for g in grants[i:] if g < first + window) for i, first in enumerate(grants))
            assert most <= 1 + per_second * window, f"key {key}: {most} tokens granted within {window} s"
        span = grants[-1] - grants[0]
        assert span >= (per_key - 1) / per_second - 0.001, f"key {key}: {per_key} tokens in {span:.4f} s"
        span = starts[-1] - starts[0]
        assert span <= (per_key - 1) / per_second * 2 + 2, f"key {key}: the limit, not the workers, paced it"
