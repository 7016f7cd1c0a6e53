from tests.sql.support import claim_one, complete, make_flow, old_run_id, q, start, step, val


def test_reports_counts() -> None:
    make_flow("f", step("a"))
    run_id = start("f", run_id=old_run_id(41))
    assert complete(claim_one("f", "a"), 1) == "completed"
    q("update pgflow.runs set completed_at = now() - interval '40 days' where run_id = %s", [run_id])
    result = val("select pgflow.prune_data_older_than(interval '30 days') as r")
    assert isinstance(result, dict)
    assert any(v == 1 for v in result.values() if isinstance(v, int)), result
    empty = val("select pgflow.prune_data_older_than(interval '30 days') as r")
    assert all(v == 0 for v in empty.values() if isinstance(v, int)), empty
