"""A replacement of an idle flow (``on_change = 'replace-if-idle'``) against a run being started at the
same moment: the check and the replacement are one step, so no run starts in between, and a run started
first (not yet committed) is counted, which refuses the replacement instead of deleting it.

Two sessions and committed rows: separate autocommit connections, the probe flow deleted afterwards."""

from __future__ import annotations

import json
import threading
from typing import Any

import psycopg

from tests.sql.support import other_connection, shape, shape_step

FLOW = "replace_race_probe"
BASE = json.dumps(shape(shape_step("a"), shape_step("b", "a")))
OTHER = json.dumps(shape(shape_step("a"), shape_step("b", "a"), shape_step("c", "b")))


def compile_in(conn: psycopg.Connection[Any], definition: str, on_change: str) -> dict[str, Any]:
    row = conn.execute(
        "select pgflow.ensure_flow_compiled(%s, %s::jsonb, %s::text)", [FLOW, definition, on_change]
    ).fetchone()
    assert row is not None
    return dict(row[0])


def test_a_start_not_yet_committed_refuses_the_replacement() -> None:
    results: dict[str, Any] = {}
    with other_connection() as starter, other_connection() as replacer:
        try:
            compile_in(starter, BASE, "refuse")
            with starter.transaction():
                starter.execute("select pgflow.start_flow(%s, '{}'::jsonb)", [FLOW])

                def replace() -> None:
                    replacer.execute("set statement_timeout = '10s'")
                    results["answer"] = compile_in(replacer, OTHER, "replace-if-idle")

                thread = threading.Thread(target=replace)
                thread.start()
                thread.join(timeout=1.0)
                assert thread.is_alive(), "the replacement must wait for the start in progress"
            thread.join(timeout=10)
            assert not thread.is_alive()
            answer = results["answer"]
            assert (answer["status"], answer["refused"], answer["unfinished_runs"]) == (
                "mismatch",
                "unfinished",
                1,
            )
            counts = starter.execute(
                "select (select count(*) from pgflow.runs where flow_slug = %(f)s),"
                " (select count(*) from pgflow.steps where flow_slug = %(f)s)",
                {"f": FLOW},
            ).fetchone()
            assert counts == (1, 2)
        finally:
            starter.execute("select pgflow.delete_flow_and_data(%s)", [FLOW])


def test_no_run_of_the_old_shape_starts_while_the_replacement_runs() -> None:
    results: dict[str, Any] = {}
    with other_connection() as starter, other_connection() as replacer:
        try:
            compile_in(replacer, BASE, "refuse")
            with replacer.transaction():
                results["answer"] = compile_in(replacer, OTHER, "replace-if-idle")

                def start() -> None:
                    starter.execute("set statement_timeout = '10s'")
                    try:
                        starter.execute("select pgflow.start_flow(%s, '{}'::jsonb)", [FLOW])
                    except psycopg.Error as exc:
                        results["start_error"] = exc

                thread = threading.Thread(target=start)
                thread.start()
                thread.join(timeout=1.0)
                assert thread.is_alive(), "a start must wait for the replacement in progress"
            thread.join(timeout=10)
            assert not thread.is_alive()
            assert results["answer"]["status"] == "recompiled"
            # the start either failed or started a run of the new shape; no run has the old two steps
            old_shape_runs = starter.execute(
                "select count(*) from pgflow.runs as r where r.flow_slug = %s"
                " and (select count(*) from pgflow.step_states as ss where ss.run_id = r.run_id) <> 3",
                [FLOW],
            ).fetchone()
            assert old_shape_runs == (0,)
            assert "start_error" in results or starter.execute(
                "select count(*) from pgflow.runs where flow_slug = %s", [FLOW]
            ).fetchone() == (1,)
        finally:
            starter.execute("select pgflow.delete_flow_and_data(%s)", [FLOW])


def test_a_start_between_its_lock_and_its_insert_does_not_deadlock_a_replacement() -> None:
    """The start has taken its shared start lock but not yet inserted its run when a replacement
    begins: the replacement waits for the start lock before it touches the flow row, so the start
    finishes and is counted, and neither side dies with a deadlock."""
    results: dict[str, Any] = {}
    with other_connection() as starter, other_connection() as replacer:
        try:
            compile_in(starter, BASE, "refuse")
            with starter.transaction():
                starter.execute(
                    "select pg_advisory_xact_lock_shared(hashtextextended('pgflow:start:' || %s, 0))", [FLOW]
                )

                def replace() -> None:
                    replacer.execute("set statement_timeout = '10s'")
                    try:
                        results["answer"] = compile_in(replacer, OTHER, "replace-if-idle")
                    except psycopg.Error as exc:
                        results["error"] = exc

                thread = threading.Thread(target=replace)
                thread.start()
                thread.join(timeout=1.0)
                assert thread.is_alive(), "the replacement must wait for the start in progress"
                starter.execute("set local statement_timeout = '10s'")
                starter.execute("select pgflow.start_flow(%s, '{}'::jsonb)", [FLOW])
            thread.join(timeout=10)
            assert not thread.is_alive()
            assert "error" not in results, results
            answer = results["answer"]
            assert (answer["status"], answer["refused"], answer["unfinished_runs"]) == (
                "mismatch",
                "unfinished",
                1,
            )
        finally:
            starter.execute("select pgflow.delete_flow_and_data(%s)", [FLOW])
