from tests.sql.support import assert_visible_in, db_error, q, vt_in


def _send(n: int) -> list[int]:
    return [q("select pgmq.send('f', %s::jsonb) as id", [f'{{"i": {i}}}'])[0]["id"] for i in range(n)]


def test_each_message_gets_its_own_offset() -> None:
    q("select pgmq.create('f')")
    ids = _send(3)
    returned = q("select * from pgflow.set_vt_batch('f', %s::bigint[], array[10, 200, 0], 'set')", [ids])
    assert sorted(r["msg_id"] for r in returned) == sorted(ids)
    assert_visible_in("f", ids[0], 10)
    assert_visible_in("f", ids[1], 200)
    assert vt_in("f", ids[2]) <= 0.1


def test_unknown_ids_ignored_and_others_untouched() -> None:
    q("select pgmq.create('f')")
    ids = _send(2)
    returned = q(
        "select * from pgflow.set_vt_batch('f', %s::bigint[], array[30, 30], 'set')", [[ids[0], 99999]]
    )
    assert [r["msg_id"] for r in returned] == [ids[0]]
    assert_visible_in("f", ids[0], 30)
    assert vt_in("f", ids[1]) <= 0.1


def test_mismatched_lengths_refused() -> None:
    q("select pgmq.create('f')")
    ids = _send(2)
    db_error("select * from pgflow.set_vt_batch('f', %s::bigint[], array[5], 'set')", [ids])
    assert vt_in("f", ids[0]) <= 0.1


def test_empty_batch() -> None:
    q("select pgmq.create('f')")
    assert q("select * from pgflow.set_vt_batch('f', '{}'::bigint[], '{}'::int[], 'set')") == []


def test_the_mode_is_explicit() -> None:
    q("select pgmq.create('f')")
    ids = _send(1)
    assert "mode must be 'set' or 'extend', got 'later'" in db_error(
        "select * from pgflow.set_vt_batch('f', %s::bigint[], array[30], 'later')", [ids]
    )
    assert "got NULL" in db_error(
        "select * from pgflow.set_vt_batch('f', %s::bigint[], array[30], null)", [ids]
    )
    assert vt_in("f", ids[0]) <= 0.1
