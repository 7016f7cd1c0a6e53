"""Workers fire schedules on their maintenance loop, each tick once however many workers run;
``--no-scheduler`` opts a worker out; ``pgflow_scheduler --once`` fires without a worker. These run on
the real clock (a per-second schedule), for a few seconds."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta

import pytest

from pgflow_django import compile_flow
from pgflow_django.schedules import create_schedule
from tests.integration.commands_support import manage_in_process
from tests.sql.support import q, val
from tests.workers import WorkerProcess, wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


@pytest.fixture
def clean_schedules(clean_example_flows: None) -> Iterator[None]:
    q("delete from pgflow.schedules")
    yield
    q("delete from pgflow.schedules")


def ledger() -> list[dict[str, object]]:
    return q("select tick, run_id from pgflow.schedule_ticks order by tick")


def test_two_workers_fire_each_tick_once(
    spawn_worker: Callable[..., WorkerProcess], clean_schedules: None
) -> None:
    spawn_worker("example_chain")
    spawn_worker("example_map")
    create_schedule("example_chain", cron="* * * * * *", name="every-second", input={"n": 1})
    wait_until(lambda: len(ledger()) >= 4, 20, "four ticks fired")
    ticks = ledger()
    assert len({row["tick"] for row in ticks}) == len(ticks)
    run_ids = {row["run_id"] for row in ticks}
    started = {row["run_id"] for row in q("select run_id from pgflow.runs where flow_slug = 'example_chain'")}
    assert run_ids <= started
    wait_until(
        lambda: (
            val(
                "select count(*) from pgflow.runs where run_id = any(%s) and status = 'completed'",
                [list(run_ids)],
            )
            == len(run_ids)
        ),
        20,
        "the scheduled runs to complete",
    )


def test_a_worker_with_no_scheduler_fires_nothing(
    spawn_worker: Callable[..., WorkerProcess], clean_schedules: None
) -> None:
    worker = spawn_worker("example_chain", "--no-scheduler")
    create_schedule("example_chain", cron="* * * * * *", name="every-second", input={"n": 1})
    deadline = datetime.now(UTC) + timedelta(seconds=3)
    wait_until(lambda: datetime.now(UTC) > deadline, 5, "three seconds")
    assert ledger() == []
    assert worker.process.poll() is None


def test_pgflow_scheduler_once_fires_the_due_tick(clean_schedules: None) -> None:
    from testproject.example.flows import chain

    compile_flow(chain)
    create_schedule("example_chain", cron="0 * * * *", name="hourly", input={"n": 1})
    q("update pgflow.schedules set upcoming = '{}', planned_until = '2026-05-01T09:30:00+00:00'")
    result = manage_in_process(
        "pgflow_scheduler", "--once", "--now", "2026-05-01T10:00:30+00:00", settings={}
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "fired hourly 2026-05-01T10:00:00+00:00 run " in result.stdout
    assert [row["tick"] for row in ledger()] == [datetime(2026, 5, 1, 10, tzinfo=UTC)]
    again = manage_in_process("pgflow_scheduler", "--once", "--now", "2026-05-01T10:00:40+00:00", settings={})
    assert again.returncode == 0 and "fired" not in again.stdout
    assert len(ledger()) == 1


def test_pgflow_scheduler_refuses_now_without_once() -> None:
    result = manage_in_process("pgflow_scheduler", "--now", "2026-05-01T10:00:00+00:00", settings={})
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        "CommandError: --now needs --once: a running scheduler fires on the clock"
    ]
