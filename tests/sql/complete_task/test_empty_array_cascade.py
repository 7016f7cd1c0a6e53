from tests.sql.support import claim_one, complete, make_flow, run, start, state, step, tasks


def test_empty_parent_array_completes_taskless_map_and_cascades() -> None:
    make_flow("f", step("a"), step("m", "a", step_type="map"), step("after", "m"))
    run_id = start("f")
    assert complete(claim_one("f", "a"), []) == "completed"
    m = state(run_id, "m")
    assert m["status"] == "completed"
    assert m["initial_tasks"] == 0
    assert m["output"] == []
    assert tasks(run_id, "m") == []
    assert state(run_id, "after")["status"] == "started"
    assert claim_one("f", "after")["input"] == {"m": []}


def test_empty_chain_of_maps_completes_run() -> None:
    make_flow(
        "f",
        step("a"),
        step("m1", "a", step_type="map"),
        step("m2", "m1", step_type="map"),
    )
    run_id = start("f")
    assert complete(claim_one("f", "a"), []) == "completed"
    assert state(run_id, "m1")["status"] == "completed"
    assert state(run_id, "m2")["status"] == "completed"
    assert state(run_id, "m2")["output"] == []
    r = run(run_id)
    assert r["status"] == "completed"
    assert r["output"] == {"m2": []}
