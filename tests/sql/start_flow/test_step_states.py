from tests.sql.support import make_flow, start, states, step


def test_one_state_per_step() -> None:
    make_flow(
        "f",
        step("a"),
        step("b", "a"),
        step("c", "a", "b"),
        step("m", "b", step_type="map"),
        step("r", step_type="map"),
    )
    run_id = start("f", [10, 20, 30])
    by_slug = states(run_id)
    assert set(by_slug) == {"a", "b", "c", "m", "r"}
    assert {s: r["remaining_deps"] for s, r in by_slug.items()} == {"a": 0, "b": 1, "c": 2, "m": 1, "r": 0}
    assert by_slug["a"]["initial_tasks"] == 1
    assert by_slug["b"]["initial_tasks"] == 1
    assert by_slug["m"]["initial_tasks"] is None
    assert by_slug["r"]["initial_tasks"] == 3


def test_ready_roots_started_others_created() -> None:
    make_flow("f", step("a"), step("b", "a"), step("r", step_type="map"))
    run_id = start("f", [1, 2])
    by_slug = states(run_id)
    assert by_slug["a"]["status"] == "started"
    assert by_slug["a"]["remaining_tasks"] == 1
    assert by_slug["r"]["status"] == "started"
    assert by_slug["r"]["remaining_tasks"] == 2
    assert by_slug["b"]["status"] == "created"
    assert by_slug["b"]["remaining_tasks"] is None
    assert by_slug["a"]["started_at"] is not None
