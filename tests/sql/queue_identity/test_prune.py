"""Pruning deletes old archive rows queue by queue: an old archived message 1 of one queue goes, the
recent archived message 1 of the other queue stays."""

import pytest

from tests.sql.support import archived_ids, claim_all, complete, q, start_twins, step


@pytest.mark.parametrize(("old", "recent"), [("f", "g"), ("g", "f")])
def test_prune_deletes_old_archive_rows_per_queue(old: str, recent: str) -> None:
    twins = start_twins(step("a"))
    assert twins.ids == [1]
    for flow in ("f", "g"):
        (rec,) = claim_all(flow)
        assert complete(rec, flow) == "completed"
    assert archived_ids("f") == archived_ids("g") == {1}
    q(f"update pgmq.a_{old} set archived_at = now() - interval '40 days' where msg_id = 1")
    result = q("select pgflow.prune_data_older_than(interval '30 days') as r")[0]["r"]
    assert result["archived_messages"] == 1
    assert archived_ids(old) == set()
    assert archived_ids(recent) == {1}
