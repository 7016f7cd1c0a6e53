"""Stalled recovery never waits on a run another transaction holds (FOR UPDATE SKIP LOCKED).

Needs committed rows seen from two sessions, so it runs on two separate autocommit connections and
deletes its probe flow afterwards."""

from tests.sql.support import other_connection

FLOW = "skip_locked_probe"


def _requeued(conn) -> int:  # type: ignore[no-untyped-def]
    rows = conn.execute("select * from pgflow.requeue_stalled_tasks()").fetchall()
    return sum(int(count) for outcome, count in rows if "requeue" in outcome)


def test_run_locked_by_another_transaction_is_skipped_not_waited_for() -> None:
    with other_connection() as sweeper, other_connection() as holder:
        sweeper.execute(f"select pgflow.create_flow('{FLOW}', timeout => 10, max_attempts => 5)")
        try:
            sweeper.execute(f"select pgflow.add_step('{FLOW}', 'a')")
            run_id = sweeper.execute(
                f"select run_id from pgflow.start_flow('{FLOW}', '{{}}'::jsonb)"
            ).fetchone()[0]
            msg_id = sweeper.execute(
                "select message_id from pgflow.step_tasks where run_id = %s", [run_id]
            ).fetchone()[0]
            claimed = sweeper.execute(
                f"select * from pgflow.start_tasks('{FLOW}', array[%s]::bigint[], gen_random_uuid())",
                [msg_id],
            ).fetchall()
            assert len(claimed) == 1
            sweeper.execute(
                "update pgflow.step_tasks set started_at = now() - interval '100 seconds' where run_id = %s",
                [run_id],
            )
            with holder.transaction():
                holder.execute("select 1 from pgflow.runs where run_id = %s for update", [run_id])
                sweeper.execute("set statement_timeout = '5s'")
                assert _requeued(sweeper) == 0
                status = sweeper.execute(
                    "select status from pgflow.step_tasks where run_id = %s", [run_id]
                ).fetchone()[0]
                assert status == "started"
            assert _requeued(sweeper) == 1
        finally:
            sweeper.execute("reset statement_timeout")
            sweeper.execute(f"select pgflow.delete_flow_and_data('{FLOW}')")
