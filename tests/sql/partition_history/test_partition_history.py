import uuid

import pytest

from tests.sql.support import claim, claim_one, complete, db_error, make_flow, old_run_id, q, start, step, val


def _partition_of(table: str, run_id: object) -> str:
    return str(
        val(f"select distinct tableoid::regclass::text as t from pgflow.{table} where run_id = %s", [run_id])
    )


def _plain() -> bool:
    return not val("select exists (select 1 from pgflow.history_partitioning) as p")


def test_without_apply_it_only_returns_the_plan(unchanged) -> None:  # type: ignore[no-untyped-def]
    if not _plain():
        pytest.skip("the test database is partitioned already (--partitioned-history)")
    check = unchanged()
    plan = [row["s"] for row in q("select s from pgflow.partition_history('7 days', 2, false) as s")]
    check()
    assert plan[0].startswith("lock table pgflow.runs, pgflow.step_states, pgflow.step_tasks")
    assert "alter table pgflow.runs attach partition pgflow.runs_default default" in plan
    assert plan[-1] == "select pgflow.create_history_partitions()"
    assert val("select relkind::text as k from pg_class where oid = 'pgflow.runs'::regclass") == "r"


def test_runs_made_before_keep_their_rows_and_find_their_partition_by_id() -> None:
    make_flow("f", step("a"), step("b", "a"))
    if not _plain():
        pytest.skip("the test database is partitioned already (--partitioned-history)")
    legacy = start("f", run_id=uuid.uuid4())
    today = start("f")
    q("select count(*) from pgflow.partition_history('1 day', 3, true)")
    assert _partition_of("runs", legacy) == "pgflow.runs_default", "a random id stays in the default"
    home = _partition_of("runs", today)
    assert home.startswith("pgflow.runs_p"), "a time-ordered id of today moved into today's partition"
    assert _partition_of("step_states", today) == home.replace("runs_", "step_states_")
    assert _partition_of("step_tasks", today) == home.replace("runs_", "step_tasks_")
    after = start("f")
    assert _partition_of("runs", after) == home
    while claimed := claim("f"):
        assert {complete(rec, 1) for rec in claimed} == {"completed"}
    statuses = q("select status from pgflow.runs where run_id = any(%s)", [[legacy, today, after]])
    assert [row["status"] for row in statuses] == ["completed"] * 3


def test_partitioning_twice_is_refused(partitioned: None) -> None:
    assert "already partitioned" in db_error("select pgflow.partition_history('1 day', 3, true)")


def test_a_bad_interval_is_refused_before_anything_changes() -> None:
    if not _plain():
        pytest.skip("the test database is partitioned already (--partitioned-history)")
    assert "whole days from 1 to 31" in db_error("select pgflow.partition_history('36 hours', 3, false)")
    assert "ahead must be from 1 to 60" in db_error("select pgflow.partition_history('1 day', 0, false)")


def test_a_late_partition_takes_its_rows_out_of_the_default_partition(partitioned: None) -> None:
    make_flow("f", step("a"))
    old = start("f", run_id=old_run_id(5))
    assert _partition_of("runs", old) == "pgflow.runs_default"
    created = val("select pgflow.create_history_partitions(now() - interval '6 days') as n")
    assert created >= 5
    home = _partition_of("runs", old)
    assert home.startswith("pgflow.runs_p")
    assert _partition_of("step_states", old) == home.replace("runs_", "step_states_")
    assert _partition_of("step_tasks", old) == home.replace("runs_", "step_tasks_")
    assert complete(claim_one("f", "a"), 1) == "completed"
    assert val("select status from pgflow.runs where run_id = %s", [old]) == "completed"
    assert val("select pgflow.create_history_partitions(now() - interval '6 days') as n") == 0
