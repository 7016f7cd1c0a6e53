from tests.sql.support import archived_ids, claim, complete, live_ids, make_flow, q, run, start, step, task


def test_completion_on_failed_run_is_stale_and_archives_message() -> None:
    make_flow("f", step("a"), step("b"))
    run_id = start("f")
    recs = {r["step_slug"]: r for r in claim("f")}
    q("select pgflow.fail_run(%s, 'operator stop')", [run_id])
    assert complete(recs["a"], {"late": True}) == "stale"
    assert run(run_id)["status"] == "failed"
    assert task(run_id, "a")["output"] is None
    assert task(run_id, "a")["status"] == "cancelled"
    assert recs["a"]["message_id"] in archived_ids("f")
    assert recs["a"]["message_id"] not in live_ids("f")
