"""release_tasks makes released messages visible in each task's own queue, grouped by queue."""

from tests.sql.support import claim_all, claim_items, q, queue_snapshot, start_twins, step, task, vt_in


def test_release_makes_only_the_released_message_visible() -> None:
    twins = start_twins(step("a"), timeout=10)
    assert twins.ids == [1]
    (rec_f,) = claim_all("f")
    claim_all("g")
    before_g = queue_snapshot("g")
    rows = q("select * from pgflow.release_tasks(%s::jsonb)", [claim_items([rec_f])])
    assert [r["outcome"] for r in rows] == ["released"]
    assert task(twins.f, "a")["status"] == "queued"
    assert vt_in("f", 1) <= 0
    assert queue_snapshot("g") == before_g
    assert task(twins.g, "a")["status"] == "started"


def test_one_release_over_two_queues_groups_by_queue() -> None:
    twins = start_twins(step("m", step_type="map"), input=["x", "y"], timeout=10)
    assert twins.ids == [1, 2]
    recs_f = {r["task_index"]: r for r in claim_all("f")}
    recs_g = {r["task_index"]: r for r in claim_all("g")}
    f0 = task(twins.f, "m", 0)["message_id"]
    g1 = task(twins.g, "m", 1)["message_id"]
    assert f0 != g1
    rows = q("select * from pgflow.release_tasks(%s::jsonb)", [claim_items([recs_f[0], recs_g[1]])])
    assert [r["outcome"] for r in rows] == ["released", "released"]
    assert vt_in("f", f0) <= 0
    assert vt_in("g", g1) <= 0
    assert vt_in("f", g1) > 5
    assert vt_in("g", f0) > 5
