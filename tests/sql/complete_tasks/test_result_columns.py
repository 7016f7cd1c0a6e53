from tests.sql.support import claim, complete_many, make_flow, start, step


def test_returns_run_step_index_outcome() -> None:
    make_flow("f", step("a"))
    start("f")
    rows = complete_many([(claim("f")[0], 1)])
    assert list(rows[0]) == ["run_id", "step_slug", "task_index", "outcome"]
