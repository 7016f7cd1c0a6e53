from tests.sql.support import claim, make_flow, q, start, step, val


def test_a_sibling_skipped_by_an_earlier_exhaustion_stays_skipped() -> None:
    """Two stalled tasks of one map step with when_exhausted=skip: the first exhaustion skips the step
    (and its sibling); recovery must not turn the skipped sibling into a failed task."""
    make_flow("f", step("m", step_type="map", when_exhausted="skip"), step("x"))
    run_id = start("f", [1, 2])
    claim("f", step_slug="m")
    q(
        "update pgflow.step_tasks set started_at = now() - interval '1 hour', requeued_count = 3 "
        "where run_id = %s and step_slug = 'm'",
        [run_id],
    )
    counts = {r["outcome"]: r["task_count"] for r in q("select * from pgflow.requeue_stalled_tasks()")}
    assert counts["permanently_stalled"] == 1
    statuses = [
        r["status"]
        for r in q(
            "select status from pgflow.step_tasks where run_id = %s and step_slug = 'm' order by task_index",
            [run_id],
        )
    ]
    assert statuses == ["failed", "skipped"]
    assert (
        val("select status from pgflow.step_states where run_id = %s and step_slug = 'm'", [run_id])
        == "skipped"
    )
