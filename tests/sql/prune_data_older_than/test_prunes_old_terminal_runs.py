from tests.sql.support import claim_one, complete, make_flow, old_run_id, q, start, step, val


def _completed_run(days: int = 41) -> object:
    run_id = start("f", run_id=old_run_id(days))
    assert complete(claim_one("f", "a"), "x") == "completed"
    return run_id


def _failed_run(days: int = 41) -> object:
    run_id = start("f", run_id=old_run_id(days))
    q("select pgflow.fail_run(%s, 'stop')", [run_id])
    return run_id


def _count(table: str, run_id: object) -> int:
    return int(val(f"select count(*) as n from pgflow.{table} where run_id = %s", [run_id]))


def _age(run_id: object, column: str, days: int) -> None:
    q(
        f"update pgflow.runs set {column} = now() - make_interval(days => %s), "
        "started_at = now() - make_interval(days => %s + 1) where run_id = %s",
        [days, days, run_id],
    )


def test_only_terminal_runs_older_than_retention_are_deleted() -> None:
    make_flow("f", step("a"))
    old_completed = _completed_run()
    old_failed = _failed_run()
    recent_completed = _completed_run(11)
    old_started = start("f", run_id=old_run_id(90))
    _age(old_completed, "completed_at", 40)
    _age(old_failed, "failed_at", 40)
    _age(recent_completed, "completed_at", 10)
    q(
        "update pgflow.runs set started_at = now() - interval '90 days' where run_id = %s",
        [old_started],
    )

    result = val("select pgflow.prune_data_older_than(interval '30 days') as r")
    assert isinstance(result, dict)

    for gone in (old_completed, old_failed):
        assert _count("runs", gone) == 0
        assert _count("step_states", gone) == 0
        assert _count("step_tasks", gone) == 0
    for kept in (recent_completed, old_started):
        assert _count("runs", kept) == 1
        assert _count("step_states", kept) == 1
        assert _count("step_tasks", kept) == 1


def test_flow_definition_kept() -> None:
    make_flow("f", step("a"))
    run_id = _completed_run()
    _age(run_id, "completed_at", 40)
    q("select pgflow.prune_data_older_than(interval '30 days')")
    assert val("select count(*) as n from pgflow.steps where flow_slug = 'f'") == 1
    assert val("select count(*) as n from pgmq.list_queues() where queue_name = 'f'") == 1
