from tests.sql.support import compile_flow, q, shape, shape_step


def test_takes_the_per_flow_advisory_lock() -> None:
    compile_flow("orders", shape(shape_step("a")))
    held = q(
        "select 1 from pg_locks where locktype = 'advisory' and pid = pg_backend_pid() "
        "and ((classid::bigint << 32) | objid::bigint) = hashtextextended('pgflow:compile:orders', 0)"
    )
    assert held, "ensure_flow_compiled must hold the per-flow lock documented in docs/sql-api.md"
