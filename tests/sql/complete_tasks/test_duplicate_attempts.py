import json

from tests.sql.support import claim, make_flow, q, start, step, task


def test_the_current_attempt_wins_over_a_stale_one_in_the_same_batch() -> None:
    make_flow("f", step("a"))
    run_id = start("f")
    claim("f")
    q("update pgflow.step_tasks set attempts_count = 2 where run_id = %s", [run_id])
    items = [
        {"run_id": str(run_id), "step_slug": "a", "task_index": 0, "attempt": 1, "output": "late"},
        {"run_id": str(run_id), "step_slug": "a", "task_index": 0, "attempt": 2, "output": "current"},
    ]
    outcomes = q("select * from pgflow.complete_tasks(%s::jsonb)", [json.dumps(items)])
    assert [o["outcome"] for o in outcomes] == ["completed"]
    assert (task(run_id, "a")["status"], task(run_id, "a")["output"]) == ("completed", "current")
