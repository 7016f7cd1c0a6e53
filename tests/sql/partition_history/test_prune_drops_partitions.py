import uuid

from tests.sql.support import (
    archived_ids,
    claim_one,
    complete,
    live_ids,
    make_flow,
    old_run_id,
    q,
    start,
    step,
    val,
)

PRUNE = "select pgflow.prune_data_older_than(interval '3 days') as r"


def _finished(days: int, run_id: uuid.UUID | None = None) -> uuid.UUID:
    """A one-step run started ``days`` ago (or under ``run_id``) that finished then too."""
    started = start("f", run_id=run_id or old_run_id(days))
    assert complete(claim_one("f", "a"), days) == "completed"
    q(
        "update pgflow.runs set started_at = now() - make_interval(days => %s),"
        " completed_at = now() - make_interval(days => %s) where run_id = %s",
        [days, days, started],
    )
    return started


def _partitions() -> set[str]:
    rows = q(
        "select inhrelid::regclass::text as t from pg_inherits where inhparent = 'pgflow.runs'::regclass"
    )
    return {row["t"] for row in rows}


def _where(run_id: uuid.UUID) -> str:
    return str(val("select tableoid::regclass::text as t from pgflow.runs where run_id = %s", [run_id]))


def test_old_intervals_are_dropped_whole_and_their_runs_counted(partitioned: None) -> None:
    make_flow("f", step("a"))
    val("select pgflow.create_history_partitions(now() - interval '10 days')")
    old = [_finished(9), _finished(8), _finished(8)]
    recent = _finished(1)
    running = start("f")
    old_home = {_where(run_id) for run_id in old}
    assert len(old_home) == 2 and old_home <= _partitions()

    result = val(PRUNE)

    assert result["partitions"] >= 2
    assert (result["runs"], result["step_states"], result["step_tasks"]) == (3, 3, 3)
    assert not old_home & _partitions(), "the old intervals' partitions are gone"
    assert val("select count(*) as n from pgflow.runs where run_id = any(%s)", [old]) == 0
    assert val("select count(*) as n from pgflow.runs where run_id = any(%s)", [[recent, running]]) == 2
    assert "pgflow.runs_default" in _partitions()
    again = val(PRUNE)
    assert (again["runs"], again["partitions"]) == (0, 0)


def test_an_interval_with_a_run_in_progress_stays_and_loses_its_finished_runs_row_by_row(
    partitioned: None,
) -> None:
    make_flow("f", step("a"))
    val("select pgflow.create_history_partitions(now() - interval '10 days')")
    finished = _finished(8)
    stuck = start("f", run_id=old_run_id(8))
    home = _where(finished)
    assert _where(stuck) == home

    result = val(PRUNE)

    assert home in _partitions(), "a started run keeps its interval's partition"
    assert result["runs"] == 1 and result["step_tasks"] == 1
    assert val("select count(*) as n from pgflow.runs where run_id = %s", [finished]) == 0
    assert val("select status from pgflow.runs where run_id = %s", [stuck]) == "started"


def test_ids_that_are_not_time_ordered_are_deleted_from_the_default_partition(partitioned: None) -> None:
    make_flow("f", step("a"))
    keyed = _finished(8, uuid.uuid5(uuid.NAMESPACE_URL, "an idempotency key"))
    young = _finished(1, uuid.uuid4())
    assert _where(keyed) == "pgflow.runs_default"

    result = val(PRUNE)

    assert result["runs"] == 1
    assert val("select count(*) as n from pgflow.runs where run_id = %s", [keyed]) == 0
    assert val("select count(*) as n from pgflow.runs where run_id = %s", [young]) == 1


def test_a_rerun_of_a_dropped_run_keeps_running_with_rerun_of_cleared(partitioned: None) -> None:
    make_flow("f", step("a"))
    val("select pgflow.create_history_partitions(now() - interval '10 days')")
    original = _finished(8)
    rerun = val("select pgflow.rerun(%s) as r", [original])
    assert val("select rerun_of from pgflow.runs where run_id = %s", [rerun]) == original

    result = val(PRUNE)

    assert result["partitions"] >= 1
    assert val("select rerun_of from pgflow.runs where run_id = %s", [rerun]) is None
    assert complete(claim_one("f", "a"), 1) == "completed"


def test_a_dropped_interval_takes_its_unfinished_tasks_messages_out_of_the_queue(partitioned: None) -> None:
    """A run failed by hand with its task's message still queued (the engine itself ends a finished run's
    tasks): dropping its interval archives that message, as the row-by-row prune does, so no worker
    reads a message whose task is gone. A run in another interval keeps its message."""
    make_flow("f", step("a"))
    val("select pgflow.create_history_partitions(now() - interval '10 days')")
    failed = start("f", run_id=old_run_id(9))
    q(
        "update pgflow.runs set status = 'failed', started_at = now() - interval '9 days',"
        " failed_at = now() - interval '9 days' where run_id = %s",
        [failed],
    )
    (orphan,) = live_ids("f")
    recent = start("f")
    (kept,) = live_ids("f") - {orphan}

    result = val(PRUNE)

    assert result["partitions"] >= 1 and result["runs"] == 1
    assert val("select count(*) as n from pgflow.runs where run_id = %s", [failed]) == 0
    assert live_ids("f") == {kept}
    assert orphan in archived_ids("f")
    assert val("select status from pgflow.runs where run_id = %s", [recent]) == "started"
