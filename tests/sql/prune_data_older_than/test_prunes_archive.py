from tests.sql.support import archived_ids, claim_one, complete, make_flow, q, start, step


def test_archive_rows_older_than_retention_deleted() -> None:
    make_flow("f", step("a"))
    start("f")
    old = claim_one("f", "a")
    assert complete(old, 1) == "completed"
    start("f")
    recent = claim_one("f", "a")
    assert complete(recent, 2) == "completed"
    assert {old["message_id"], recent["message_id"]} <= archived_ids("f")
    q("update pgmq.a_f set archived_at = now() - interval '40 days' where msg_id = %s", [old["message_id"]])
    q("select pgflow.prune_data_older_than(interval '30 days')")
    ids = archived_ids("f")
    assert old["message_id"] not in ids
    assert recent["message_id"] in ids
