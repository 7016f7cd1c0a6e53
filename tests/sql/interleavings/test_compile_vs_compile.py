"""Compile vs compile of one slug with *different* shapes (the same-shape race, answered ``verified``,
is tests/sql/ensure_flow_compiled/test_concurrent_compile.py): the second compiler waits on the per-flow
advisory lock, then answers ``mismatch`` and changes nothing, so two deployments racing with different
code never mix their definitions."""

from __future__ import annotations

import json
from typing import Any

from tests.sql.interleavings.support import (
    Background,
    backend_pid,
    check_invariants,
    sessions,
    wait_for_lock_wait,
)
from tests.sql.support import shape, shape_step

FLOW = "ilv_compile_compile"
CHAIN = json.dumps(shape(shape_step("a"), shape_step("b", "a")))
FORK = json.dumps(shape(shape_step("a"), shape_step("b"), shape_step("c", "a", "b")))


def test_second_compiler_with_another_shape_waits_then_mismatches() -> None:
    with sessions(FLOW) as (first, second, observer):

        def compile_second() -> Any:
            row = second.execute("select pgflow.ensure_flow_compiled(%s, %s::jsonb)", [FLOW, FORK]).fetchone()
            assert row is not None
            return row[0]

        with first.transaction():
            row = first.execute("select pgflow.ensure_flow_compiled(%s, %s::jsonb)", [FLOW, CHAIN]).fetchone()
            assert row is not None and row[0]["status"] == "compiled"
            job = Background(compile_second)
            assert wait_for_lock_wait(observer, backend_pid(second), job) == "advisory"
        result = job.result()

        assert result["status"] == "mismatch", result
        steps = observer.execute(
            "select step_slug, deps_count from pgflow.steps where flow_slug = %s order by step_index", [FLOW]
        ).fetchall()
        assert steps == [("a", 0), ("b", 1)], "the first definition stands, untouched"
        check_invariants(observer, require_terminal=True)
