from tests.sql.support import make_flow, queue_messages, start, step


def test_start_delay_delays_visibility() -> None:
    make_flow("f", step("a", start_delay=40), step("b"))
    run_id = start("f")
    by_step = {m["message"]["step_slug"]: m for m in queue_messages("f")}
    assert 39.4 <= by_step["a"]["vt_in"] <= 40.05
    assert by_step["b"]["vt_in"] <= 0.5
    delayed = [m for m in queue_messages("f") if m["message"]["run_id"] == str(run_id)]
    assert len(delayed) == 2


def test_delayed_message_not_read() -> None:
    make_flow("f", step("a", start_delay=40))
    start("f")
    from tests.sql.support import claim

    assert claim("f") == []
