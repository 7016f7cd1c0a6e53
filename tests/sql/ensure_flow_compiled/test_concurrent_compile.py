"""Two workers compiling the same new flow at once: the second waits for the first and verifies.

Needs two sessions and committed rows: separate autocommit connections, probe flow deleted afterwards."""

import json
import threading

from tests.sql.support import other_connection, shape, shape_step

FLOW = "compile_race_probe"
SHAPE = json.dumps(shape(shape_step("a"), shape_step("b", "a")))


def test_second_compiler_waits_then_verifies() -> None:
    results: dict[str, object] = {}
    with other_connection() as first, other_connection() as second:
        try:
            with first.transaction():
                results["first"] = first.execute(
                    "select pgflow.ensure_flow_compiled(%s, %s::jsonb)", [FLOW, SHAPE]
                ).fetchone()[0]

                def compile_second() -> None:
                    second.execute("set statement_timeout = '10s'")
                    results["second"] = second.execute(
                        "select pgflow.ensure_flow_compiled(%s, %s::jsonb)", [FLOW, SHAPE]
                    ).fetchone()[0]

                thread = threading.Thread(target=compile_second)
                thread.start()
                thread.join(timeout=1.0)
                assert thread.is_alive(), "the second compiler must wait for the first one's lock"
            thread.join(timeout=10)
            assert not thread.is_alive()
            assert results["first"]["status"] == "compiled"  # type: ignore[index]
            assert results["second"]["status"] == "verified"  # type: ignore[index]
            steps = first.execute(
                "select count(*) from pgflow.steps where flow_slug = %s", [FLOW]
            ).fetchone()[0]
            assert steps == 2
        finally:
            first.execute("select pgflow.delete_flow_and_data(%s)", [FLOW])
