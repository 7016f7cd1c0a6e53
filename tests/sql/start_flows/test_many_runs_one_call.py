import uuid

from tests.sql.support import jb, make_flow, q, queue_messages, run, states, step, tasks


def test_one_run_per_element() -> None:
    make_flow("f", step("a"), step("b", "a"))
    inputs = [{"n": 1}, {"n": 2}, {"n": 3}]
    returned = q("select * from pgflow.start_flows('f', %s::jsonb)", [jb(inputs)])
    assert len(returned) == 3
    assert sorted(r["input"]["n"] for r in returned) == [1, 2, 3]
    for row in returned:
        assert run(row["run_id"])["status"] == "started"
        assert run(row["run_id"])["remaining_steps"] == 2
        by_slug = states(row["run_id"])
        assert by_slug["a"]["status"] == "started"
        assert by_slug["b"]["status"] == "created"
        assert [t["step_slug"] for t in tasks(row["run_id"])] == ["a"]
    bodies = [m["message"] for m in queue_messages("f")]
    assert sorted(b["run_id"] for b in bodies) == sorted(str(r["run_id"]) for r in returned)


def test_given_run_ids_are_used_in_order() -> None:
    make_flow("f", step("a"))
    ids = [uuid.uuid4(), uuid.uuid4()]
    returned = q(
        "select * from pgflow.start_flows('f', %s::jsonb, %s::uuid[])", [jb([{"i": 0}, {"i": 1}]), ids]
    )
    assert {r["run_id"]: r["input"]["i"] for r in returned} == {ids[0]: 0, ids[1]: 1}


def test_runs_come_back_in_input_order_whatever_order_their_ids_sort_in() -> None:
    """The n-th row is the n-th input's run. Ids made in one millisecond differ in random bits, so
    they sort in no particular order, and given ids may be in any; a start that returned them by id
    (PostgreSQL 16 and later may sort an aggregate's input for a neighbouring ordered aggregate)
    paired callers' inputs with the wrong runs."""
    make_flow("f", step("a"))
    inputs = [{"i": i} for i in range(40)]
    made = q("select run_id, input from pgflow.start_flows('f', %s::jsonb)", [jb(inputs)])
    assert [row["input"]["i"] for row in made] == list(range(40))
    given = sorted((uuid.uuid4() for _ in range(40)), reverse=True)
    returned = q(
        "select run_id, input from pgflow.start_flows('f', %s::jsonb, %s::uuid[])", [jb(inputs), given]
    )
    assert [(row["run_id"], row["input"]["i"]) for row in returned] == list(
        zip(given, range(40), strict=True)
    )


def test_root_map_runs_get_their_own_sizes() -> None:
    make_flow("f", step("m", step_type="map"))
    returned = q("select * from pgflow.start_flows('f', %s::jsonb)", [jb([[1], [1, 2, 3], []])])
    sizes = {len(r["input"]): r["run_id"] for r in returned}
    assert len(tasks(sizes[1], "m")) == 1
    assert len(tasks(sizes[3], "m")) == 3
    assert run(sizes[0])["status"] == "completed"


def test_empty_array_starts_nothing() -> None:
    make_flow("f", step("a"))
    assert q("select * from pgflow.start_flows('f', '[]'::jsonb)") == []
    assert q("select * from pgflow.runs") == []
