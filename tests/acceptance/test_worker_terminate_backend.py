"""pg_terminate_backend of a running worker's connections (found by their ``application_name``,
``pgflow_worker supervisor`` / ``completer`` / ``listener``): while it polls, between read and claim
(terminated over and over while a backlog drains), and between handler and completion (terminated
while handlers sleep, with the atomic handlers' own connections). The worker reconnects without a
restart and every run completes, each effect exactly once.

Counts (issue 8, item 2): ROUNDS idle terminations of all three connections (CI 3; ``make chaos`` 10);
a backlog of BACKLOG tasks drained under KILL_SECONDS of repeated terminations (CI 300 / 6 s; chaos
3,000 / 30 s); HANDLERS sleeping handlers cut from their completion (CI 4; chaos 16).
"""

from __future__ import annotations

import random
import threading
import time
from pathlib import Path

import pytest

from tests import ledger
from tests.acceptance.faults import FAST, WORKER_ROLES, Rig, alive, scale
from tests.workers import wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

ROUNDS = scale(3, 10)
BACKLOG, KILL_SECONDS = scale(300, 3000), scale(6, 30)
HANDLERS = scale(4, 16)
SLOW_POLL = ("--poll-interval", "60", "--max-poll-seconds", "60", "--heartbeat-seconds", "60")
"""No fallback read and no heartbeat for a minute: only a reconnected listener can wake the worker."""


def test_an_idle_worker_reconnects_every_connection_and_wakes_on_the_next_run(rig: Rig) -> None:
    flow, db = ledger.LEDGER_FLOW, rig.db
    worker = rig.spawn(flow, "--concurrency", "4", *SLOW_POLL)
    runs: list[str] = []
    for _ in range(ROUNDS):
        wait_until(lambda: len(db.backends("pgflow_worker listener")) == 1, 20, "the listener to connect")
        listener = db.backends("pgflow_worker listener")
        assert db.terminate() >= 2, "the supervisor's and the listener's connections at least"
        wait_until(
            lambda old=listener: db.backends("pgflow_worker listener") - old, 20, "the listener to reconnect"
        )
        batch = db.start(flow, [list(range(5))])
        db.wait_finished([flow], 20)  # within the 60 s poll: the notification woke it
        runs += batch
    assert set(db.run_statuses(runs).values()) == {"completed"}
    assert db.executions(runs) == 5 * ROUNDS
    log = worker.log()
    assert "listener lost its connection" in log
    assert "database unavailable" in log
    alive(worker)
    db.check(flow)


def test_a_backlog_drains_while_the_claiming_connections_are_terminated_again_and_again(rig: Rig) -> None:
    flow, db = ledger.LEDGER_FLOW, rig.db
    workers = rig.spawn.many(2, flow, "--concurrency", "4", *FAST)
    runs = db.start(flow, [list(range(100))] * (BACKLOG // 100))
    done = threading.Event()
    terminated = [0]

    def killer() -> None:
        """Cut the supervisors often (some land between read and claim), the completers now and then."""
        from tests.acceptance.faults import Db

        own = Db(db.url)
        try:
            rounds = 0
            stop_at = time.monotonic() + KILL_SECONDS
            while not done.is_set() and time.monotonic() < stop_at:
                roles = WORKER_ROLES if rounds % 4 == 0 else ("pgflow_worker supervisor",)
                terminated[0] += own.terminate(roles)
                rounds += 1
                time.sleep(random.uniform(0.02, 0.25))
        finally:
            own.close()

    thread = threading.Thread(target=killer, daemon=True)
    thread.start()
    try:
        wait_until(lambda: not thread.is_alive() or not db.unfinished([flow]), KILL_SECONDS + 60, "killer")
    finally:
        done.set()
        thread.join(10)
    assert terminated[0] >= 5, f"only {terminated[0]} connections were terminated"

    # A claim that committed while its connection died is lost to its worker: recovery takes it back
    # after its deadline, simulated by back-dating claims older than the last termination.
    stopped = db.now()
    time.sleep(2)
    db.backdate_lost_claims(stopped)
    db.wait_finished([flow], 60)
    assert set(db.run_statuses(runs).values()) == {"completed"}
    assert len(db.effects(runs)) == BACKLOG
    assert any("database unavailable" in worker.log() for worker in workers)
    alive(*workers)
    db.check(flow)


@pytest.mark.parametrize("flow", [ledger.LEDGER_FLOW, ledger.PLAIN_FLOW])
def test_connections_cut_between_handler_and_completion(rig: Rig, flow: str, tmp_path: Path) -> None:
    """Atomic handlers lose their own transaction (and retry as attempt 2); plain handlers' results
    are re-sent by the completer on a new connection (attempt 1 completes)."""
    db = rig.db
    worker = rig.spawn(flow, "--concurrency", str(HANDLERS), *FAST)
    warm_up = db.start(flow, [[0]])
    db.wait_finished([flow], 20)
    # atomic handlers wait in their open transaction until the cut is made (a fixed sleep could end
    # before it on a busy machine); plain ones only need to outlast the completer's cut, or not
    gate = tmp_path / "hold"
    gate.touch()
    item = {"hold": str(gate)} if flow == ledger.LEDGER_FLOW else {"sleep": 3}
    runs = db.start(flow, [[item] * HANDLERS])
    wait_until(lambda: db.executions(runs) == HANDLERS, 60, "every handler to be asleep")
    holders = [
        int(row[0])
        for row in db.rows(
            "select distinct pid from pg_locks where relation = 'public.ledger_effect'::regclass "
            "and database = (select oid from pg_database where datname = current_database()) "
            "and pid <> pg_backend_pid()"
        )
    ]
    completer = db.backends("pgflow_worker completer")
    if flow == ledger.LEDGER_FLOW:
        assert len(holders) == HANDLERS, "each atomic handler's open transaction holds its effect"
    else:
        assert completer, "the plain warm-up run's completion connected the completer"
    assert db.terminate(("pgflow_worker completer",), holders) == len(holders) + len(completer)
    gate.unlink()

    db.wait_finished([flow], 60)
    assert set(db.run_statuses(runs).values()) == {"completed"}
    if flow == ledger.LEDGER_FLOW:
        assert db.effects(runs) == [(2, worker.pid)] * HANDLERS, "the cut attempts rolled back"
        assert db.executions(runs, attempt=2) == HANDLERS
        db.check(flow)
    else:
        assert db.executions(runs) == db.executions(runs, attempt=1) == HANDLERS
        db.check()
    assert db.run_statuses(warm_up) == {warm_up[0]: "completed"}
    alive(worker)
