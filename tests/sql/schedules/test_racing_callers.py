"""Exactly once under concurrency: four connections racing over 200 ticks, a firing process killed
with SIGKILL in the middle of its call, and two interleavings of fire_due_schedules on two
connections. All data is committed, so every connection sees what the others did."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from datetime import timedelta
from typing import Any

import pytest

from pgflow_django.schedules.service import run_pass
from tests.sql.schedules.committed import T0, committed_schedule, ledger, run_ids
from tests.sql.support import other_connection

pytestmark = pytest.mark.django_db


def test_four_callers_racing_over_200_ticks_fire_each_tick_once() -> None:
    flow, name = "sched_race", "race"
    with committed_schedule(flow, name) as conn:
        barrier = threading.Barrier(4)
        errors: list[BaseException] = []

        def caller() -> None:
            own = other_connection()
            try:
                for second in range(1, 201):
                    barrier.wait(30)  # the four share one simulated clock and call together
                    run_pass(own, now=T0 + timedelta(seconds=second, milliseconds=500))
            except BaseException as exc:
                errors.append(exc)
            finally:
                own.close()

        threads = [threading.Thread(target=caller) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        assert not errors
        ticks = ledger(conn, name)
        assert [tick for tick, _ in ticks] == [T0 + timedelta(seconds=s) for s in range(1, 201)]
        assert {run_id for _, run_id in ticks} == run_ids(conn, flow)
        assert len(run_ids(conn, flow)) == 200


def test_a_firing_process_killed_mid_call_loses_no_tick_and_doubles_none() -> None:
    flow, name = "sched_kill", "kill"
    with committed_schedule(flow, name) as conn:
        holder = other_connection()
        # the child's call blocks inside pgflow.start_flows (after writing its ledger row) on the
        # flow's start lock, which this connection holds; it is killed there, before its commit (its
        # backend then finishes the statement, finds the client gone and rolls back)
        holder.execute("begin")
        holder.execute("select pg_advisory_xact_lock(hashtextextended('pgflow:start:' || %s, 0))", [flow])
        params = conn.info.get_parameters()
        at = (T0 + timedelta(seconds=3.5)).isoformat()
        script = textwrap.dedent(
            f"""
            import psycopg
            conn = psycopg.connect(dbname={params["dbname"]!r}, user={params["user"]!r},
                                   host={conn.info.host!r}, port={conn.info.port},
                                   application_name="sched_kill_child")
            conn.execute("select * from pgflow.fire_due_schedules(%s)", [{at!r}])
            conn.commit()
            """
        )
        child = subprocess.Popen([sys.executable, "-c", script])
        try:
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                waiting = conn.execute(
                    "select count(*) from pg_stat_activity where application_name = 'sched_kill_child' "
                    "and wait_event_type = 'Lock'"
                ).fetchone()
                if waiting and waiting[0]:
                    break
                time.sleep(0.05)
            else:
                pytest.fail("the firing process never reached the start lock")
            os.kill(child.pid, signal.SIGKILL)
            child.wait(10)
        finally:
            if child.poll() is None:
                child.kill()
            holder.execute("rollback")
            holder.close()
        deadline = time.monotonic() + 20
        while conn.execute(
            "select count(*) from pg_stat_activity where application_name = 'sched_kill_child'"
        ).fetchone()[0]:
            assert time.monotonic() < deadline, "the killed process's backend is still there"
            time.sleep(0.05)
        assert ledger(conn, name) == []
        assert run_ids(conn, flow) == set()
        fired = run_pass(conn, now=T0 + timedelta(seconds=3.5)).fired
        assert [tick.tick for tick in fired] == [T0 + timedelta(seconds=s) for s in (1, 2, 3)]
        assert run_pass(conn, now=T0 + timedelta(seconds=3.6)).fired == []
        assert [tick for tick, _ in ledger(conn, name)] == [T0 + timedelta(seconds=s) for s in (1, 2, 3)]
        assert {run_id for _, run_id in ledger(conn, name)} == run_ids(conn, flow)


def _fire(conn: Any, seconds: float) -> list[Any]:
    return conn.execute(
        "select tick from pgflow.fire_due_schedules(%s)", [T0 + timedelta(seconds=seconds)]
    ).fetchall()


def test_a_second_caller_returns_at_once_while_the_first_holds_its_transaction() -> None:
    flow, name = "sched_inter", "inter"
    with committed_schedule(flow, name) as conn:
        first, second = other_connection(), other_connection()
        try:
            first.execute("begin")
            assert len(_fire(first, 2.5)) == 2
            started = time.monotonic()
            assert _fire(second, 2.5) == []  # skipped: the firing lock is held, it does not wait
            assert time.monotonic() - started < 2
            first.execute("commit")
            assert _fire(second, 2.5) == []  # consumed by the first caller
            assert [row[0] for row in _fire(second, 3.5)] == [T0 + timedelta(seconds=3)]
        finally:
            first.close()
            second.close()
        assert len(ledger(conn, name)) == 3 and len(run_ids(conn, flow)) == 3


def test_a_schedule_being_edited_is_skipped_and_fires_after_the_edit_commits() -> None:
    flow, name = "sched_edit", "edit"
    with committed_schedule(flow, name) as conn:
        editor, firer = other_connection(), other_connection()
        try:
            editor.execute("begin")
            editor.execute("select 1 from pgflow.schedules where schedule_name = %s for update", [name])
            assert _fire(firer, 1.5) == []  # the locked row is skipped, not waited for
            editor.execute("commit")
            assert [row[0] for row in _fire(firer, 1.5)] == [T0 + timedelta(seconds=1)]
        finally:
            editor.close()
            firer.close()
        assert len(ledger(conn, name)) == 1 and len(run_ids(conn, flow)) == 1
