"""A run's start delay counts from the call, not from its transaction's start: a run started late in
a long transaction is not visible early."""

from tests.sql.support import make_flow, q, step, val


def test_not_before_counts_from_the_call() -> None:
    make_flow("late", step("a"))
    q("select pg_sleep(1.2)")  # the test's transaction is already this old at the call
    run_id = val("select run_id from pgflow.start_flow('late', '{}'::jsonb, null, 5)")
    late = "clock_timestamp() + interval '4.5 seconds'"
    assert val(f"select not_before >= {late} as ok from pgflow.runs where run_id = %s", [run_id])
    assert val(f"select vt >= {late} as ok from pgmq.q_late")
