from tests.sql.support import assert_visible_in, db_error, q, queue_messages, vt_in


def _send(n: int) -> list[int]:
    return [q("select pgmq.send('f', %s::jsonb) as id", [f'{{"i": {i}}}'])[0]["id"] for i in range(n)]


def _hide(msg_id: int, seconds: int) -> None:
    q(
        "update pgmq.q_f set vt = clock_timestamp() + make_interval(secs => %s) where msg_id = %s",
        [seconds, msg_id],
    )


def test_a_shorter_visibility_is_extended_to_the_offset() -> None:
    q("select pgmq.create('f')")
    ids = _send(2)
    _hide(ids[1], 5)
    q("select * from pgflow.set_vt_batch('f', %s::bigint[], array[60, 60], 'extend')", [ids])
    assert_visible_in("f", ids[0], 60)
    assert_visible_in("f", ids[1], 60)


def test_a_message_already_hidden_long_enough_is_not_written() -> None:
    q("select pgmq.create('f')")
    ids = _send(2)
    _hide(ids[0], 600)
    _hide(ids[1], 60)
    before = {m["msg_id"]: m["vt"] for m in queue_messages("f")}
    xmin_before = {r["msg_id"]: r["xmin"] for r in q("select msg_id, xmin::text from pgmq.q_f")}
    q("select * from pgflow.set_vt_batch('f', %s::bigint[], array[62, 60], 'extend')", [ids])
    after = {m["msg_id"]: m["vt"] for m in queue_messages("f")}
    xmin_after = {r["msg_id"]: r["xmin"] for r in q("select msg_id, xmin::text from pgmq.q_f")}
    assert after == before, "a visibility at least as long as the offset (within a second) stays as it is"
    assert xmin_after == xmin_before, "and its row is not rewritten"


def test_unknown_ids_are_ignored() -> None:
    q("select pgmq.create('f')")
    ids = _send(1)
    q("select * from pgflow.set_vt_batch('f', %s::bigint[], array[30, 30], 'extend')", [[ids[0], 99999]])
    assert_visible_in("f", ids[0], 30)


def test_mismatched_lengths_are_refused_and_empty_batches_do_nothing() -> None:
    q("select pgmq.create('f')")
    ids = _send(2)
    db_error("select * from pgflow.set_vt_batch('f', %s::bigint[], array[5], 'extend')", [ids])
    assert vt_in("f", ids[0]) <= 0.1
    q("select * from pgflow.set_vt_batch('f', '{}'::bigint[], '{}'::int[], 'extend')")
    assert vt_in("f", ids[1]) <= 0.1
