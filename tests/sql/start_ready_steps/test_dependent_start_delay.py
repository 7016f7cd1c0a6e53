from tests.sql.support import assert_visible_in, claim_one, complete, make_flow, start, step, task, vt_in


def test_dependent_step_messages_use_its_start_delay() -> None:
    make_flow("f", step("a"), step("b", "a", start_delay=25), step("c", "a"))
    run_id = start("f")
    assert complete(claim_one("f", "a"), 1) == "completed"
    assert_visible_in("f", task(run_id, "b")["message_id"], 25)
    assert vt_in("f", task(run_id, "c")["message_id"]) <= 0.5
