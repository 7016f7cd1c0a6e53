"""The queue-aware claim start_tasks(queue_name, flow_slug, msg_ids, worker_id) matches (queue, message
id): claiming id 1 on one queue never claims, delays or reads the other queue's message 1."""

from tests.sql.support import (
    claim_at,
    queue_snapshot,
    read_ids,
    start_twins,
    step,
    task,
)


def test_claim_on_one_queue_leaves_the_same_id_on_the_other_queue_alone() -> None:
    twins = start_twins(step("a"), step("b"))
    assert twins.ids == [1, 2]
    before_f = queue_snapshot("f")
    ids = read_ids("g")
    assert ids == [1, 2]
    records = claim_at("g", "g", ids)
    assert [(r["outcome"], r["run_id"], r["flow_slug"]) for r in records] == [
        ("claimed", twins.g, "g"),
        ("claimed", twins.g, "g"),
    ]
    for slug in ("a", "b"):
        assert task(twins.g, slug)["status"] == "started"
        row = task(twins.f, slug)
        assert (row["status"], row["attempts_count"], row["last_worker_id"]) == ("queued", 0, None)
    assert queue_snapshot("f") == before_f


def test_each_flow_claims_its_own_message_with_the_same_id() -> None:
    twins = start_twins(step("a"))
    assert twins.ids == [1]
    (rec_f,) = claim_at("f", "f", [1])
    (rec_g,) = claim_at("g", "g", [1])
    assert (rec_f["outcome"], rec_f["run_id"], rec_f["message_id"]) == ("claimed", twins.f, 1)
    assert (rec_g["outcome"], rec_g["run_id"], rec_g["message_id"]) == ("claimed", twins.g, 1)
    assert task(twins.f, "a")["attempts_count"] == 1
    assert task(twins.g, "a")["attempts_count"] == 1
