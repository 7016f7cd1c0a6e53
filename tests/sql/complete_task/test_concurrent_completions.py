"""Two workers finish the last two tasks of a map at the same time: both count, the step completes once.

Needs committed rows and two sessions: separate autocommit connections, probe flow deleted afterwards."""

import threading

from tests.sql.support import other_connection

FLOW = "concurrent_complete_probe"


def test_parallel_completions_do_not_lose_updates() -> None:
    with other_connection() as one, other_connection() as two:
        one.execute(f"select pgflow.create_flow('{FLOW}')")
        try:
            one.execute(f"select pgflow.add_step('{FLOW}', 'm', step_type => 'map')")
            one.execute(f"select pgflow.add_step('{FLOW}', 'after', array['m'])")
            run_id = one.execute(
                f"select run_id from pgflow.start_flow('{FLOW}', '[1, 2]'::jsonb)"
            ).fetchone()[0]
            ids = [
                r[0]
                for r in one.execute(
                    "select message_id from pgflow.step_tasks where run_id = %s order by task_index", [run_id]
                ).fetchall()
            ]
            claimed = one.execute(
                "select task_index, attempt from pgflow.start_tasks(%s, %s::bigint[], gen_random_uuid())",
                [FLOW, ids],
            ).fetchall()
            attempts = dict(claimed)
            outcomes: dict[int, str] = {}

            def finish(conn, index: int) -> None:  # type: ignore[no-untyped-def]
                outcomes[index] = conn.execute(
                    "select pgflow.complete_task(%s, 'm', %s, %s, %s::jsonb)",
                    [run_id, index, attempts[index], f'"out-{index}"'],
                ).fetchone()[0]

            with one.transaction():
                finish(one, 1)
                two.execute("set statement_timeout = '10s'")
                thread = threading.Thread(target=finish, args=(two, 0))
                thread.start()
                thread.join(timeout=0.5)
            thread.join(timeout=10)
            assert not thread.is_alive()
            assert outcomes == {0: "completed", 1: "completed"}
            status, remaining, output = one.execute(
                "select status, remaining_tasks, output::text from pgflow.step_states "
                "where run_id = %s and step_slug = 'm'",
                [run_id],
            ).fetchone()
            assert (status, remaining) == ("completed", 0)
            assert output == '["out-0", "out-1"]'
            after_tasks = one.execute(
                "select count(*) from pgflow.step_tasks where run_id = %s and step_slug = 'after'", [run_id]
            ).fetchone()[0]
            assert after_tasks == 1
            assert (
                one.execute("select remaining_steps from pgflow.runs where run_id = %s", [run_id]).fetchone()[
                    0
                ]
                == 1
            )
        finally:
            one.execute(f"select pgflow.delete_flow_and_data('{FLOW}')")
