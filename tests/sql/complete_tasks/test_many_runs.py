from tests.sql.support import claim, complete_many, jb, make_flow, q, run, state, step


def test_completions_across_many_runs_in_one_call() -> None:
    make_flow("f", step("a"), step("b", "a"))
    runs = [
        r["run_id"]
        for r in q("select * from pgflow.start_flows('f', %s::jsonb)", [jb([{"i": i} for i in range(5)])])
    ]
    recs = claim("f")
    assert len(recs) == 5
    result = complete_many([(rec, {"done": str(rec["run_id"])}) for rec in recs])
    assert {r["run_id"] for r in result} == set(runs)
    assert {r["outcome"] for r in result} == {"completed"}
    for run_id in runs:
        assert state(run_id, "a")["output"] == {"done": str(run_id)}
        assert state(run_id, "b")["status"] == "started"
    b_recs = claim("f")
    assert len(b_recs) == 5
    complete_many([(rec, rec["input"]) for rec in b_recs])
    for run_id in runs:
        r = run(run_id)
        assert r["status"] == "completed"
        assert r["output"] == {"b": {"a": {"done": str(run_id)}}}
