import uuid

from tests.sql.support import make_flow, q1, run, start, step


def test_run_inserted_with_remaining_steps() -> None:
    make_flow("f", step("a"), step("b", "a"), step("c", "a"))
    returned = q1("select * from pgflow.start_flow('f', '{\"x\": 1}'::jsonb)")
    row = run(returned["run_id"])
    assert row["status"] == "started"
    assert row["flow_slug"] == "f"
    assert row["input"] == {"x": 1}
    assert row["remaining_steps"] == 3
    assert row["output"] is None
    assert returned["run_id"] == row["run_id"]


def test_given_run_id_is_used() -> None:
    make_flow("f", step("a"))
    wanted = uuid.uuid4()
    assert start("f", {}, run_id=wanted) == wanted
    assert run(wanted)["status"] == "started"


def test_input_kept_as_given() -> None:
    make_flow("f", step("a"))
    for value in ([1, 2], "text", 0, False, None):
        run_id = q1("select * from pgflow.start_flow('f', %s::jsonb)", [__import__("json").dumps(value)])[
            "run_id"
        ]
        assert run(run_id)["input"] == value
