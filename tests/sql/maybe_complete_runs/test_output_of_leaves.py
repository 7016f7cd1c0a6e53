from tests.sql.support import claim_one, complete, make_flow, run, start, step


def test_output_maps_each_completed_leaf_to_its_output() -> None:
    make_flow(
        "f",
        step("root"),
        step("mid", "root"),
        step("leaf1", "mid"),
        step("leaf2", "root"),
        step("leafmap", "root", step_type="map"),
    )
    run_id = start("f")
    assert complete(claim_one("f", "root"), [1, 2]) == "completed"
    assert complete(claim_one("f", "mid"), "m") == "completed"
    assert complete(claim_one("f", "leaf2"), {"two": 2}) == "completed"
    from tests.sql.support import claim

    for rec in claim("f", step_slug="leafmap"):
        assert complete(rec, rec["input"] + 100) == "completed"
    assert run(run_id)["status"] == "started"
    assert complete(claim_one("f", "leaf1"), False) == "completed"
    r = run(run_id)
    assert r["status"] == "completed"
    assert r["output"] == {"leaf1": False, "leaf2": {"two": 2}, "leafmap": [101, 102]}
