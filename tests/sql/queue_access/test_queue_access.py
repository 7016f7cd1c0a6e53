"""pgflow.queue_access: a branch of static SQL for each pgflow queue whose tables have PGMQ's layout,
PGMQ's own (dynamic) statements for any other queue, and the same results either way."""

from __future__ import annotations

from typing import Any

import pytest

from tests.sql.queue_access.support import BRANCH_SOURCES, check_static_matches_dynamic
from tests.sql.queue_access.support import access as run_access
from tests.sql.support import db_error, make_flow, q, step, val


def branches() -> list[str]:
    return list(val("select pgflow.write_queue_access() as value"))


def source() -> str:
    return str(val(BRANCH_SOURCES))


def access(
    op: str, queue: str, ids: Any = None, numbers: Any = None, messages: Any = None
) -> list[dict[str, Any]]:
    return run_access(q, op, queue, ids, numbers, messages)


def test_a_flow_queue_gets_a_branch_and_loses_it_with_its_flow() -> None:
    make_flow("qa_flow", step("a"))
    assert "if v_queue = 'qa_flow' then" in source(), "written when the queue was created"
    assert "qa_flow" in branches()
    q("select pgflow.delete_flow_and_data('qa_flow')")
    assert "qa_flow" not in branches()
    assert "'qa_flow'" not in source()


def test_step_queues_get_branches_when_created() -> None:
    q("select pgflow.create_flow('qa_steps', queue_mode => 'step')")
    q("select pgflow.add_step('qa_steps', 'a')")
    q("select pgflow.add_step('qa_steps', 'b', array['a'])")
    text = source()
    assert all(f"if v_queue = '{queue}' then" in text for queue in ("qa_steps__a", "qa_steps__b"))
    assert {"qa_steps__a", "qa_steps__b"} <= set(branches())


def test_a_queue_pgflow_does_not_know_has_no_branch() -> None:
    q("select pgmq.create('qa_raw')")
    assert "qa_raw" not in branches()
    assert "'qa_raw'" not in source()


def test_static_and_dynamic_statements_give_the_same_results() -> None:
    make_flow("qa_static", step("a"))
    q("select pgmq.create('qa_dynamic')")
    assert "qa_static" in branches() and "qa_dynamic" not in branches()
    check_static_matches_dynamic(q, "qa_static", "qa_dynamic")


def test_the_head_skips_hidden_messages_and_takes_the_highest_priority_first() -> None:
    make_flow("qa_head", step("a"))
    sent = run_access(
        q, "send", "qa_head", None, [0], ['{"i": 1}', '{"i": 2}', '{"i": 3}'], [None, '{"priority": 3}', None]
    )
    ids = [row["msg_id"] for row in sent]
    assert [row["msg_id"] for row in access("head", "qa_head")] == [ids[1]]
    access("set", "qa_head", [ids[1]], [60])
    assert [row["msg_id"] for row in access("head", "qa_head")] == [ids[0]]


def test_a_queue_whose_tables_differ_from_pgmqs_gets_no_branch_until_they_match_again() -> None:
    make_flow("qa_layout", step("a"))
    assert "qa_layout" in branches()
    q("alter table pgmq.a_qa_layout alter column headers type json")
    assert "qa_layout" not in branches()
    assert "'qa_layout'" not in source()
    q("alter table pgmq.a_qa_layout alter column headers type jsonb")
    assert "qa_layout" in branches()


def test_the_function_is_rewritten_only_when_its_text_changes() -> None:
    """A rewrite makes a new row version of the function (a new ctid, even within this test's
    transaction, where xmin would not change)."""
    versions = (
        "select string_agg(p.ctid::text, ' ' order by p.proname) as value from pg_proc as p"
        " where p.pronamespace = 'pgflow'::regnamespace and p.proname ~ '^queue_access(_[0-9]{3})?$'"
    )
    make_flow("qa_same", step("a"))
    branches()
    before = val(versions)
    branches()
    assert val(versions) == before
    make_flow("qa_other", step("a"))
    assert val(versions) != before, "a new queue's branch is a rewrite"


@pytest.mark.parametrize("op", ["read", None])
def test_an_unknown_operation_is_refused(op: str | None) -> None:
    make_flow("qa_op", step("a"))
    for queue in ("qa_op", "qa_unknown"):
        error = db_error("select * from pgflow.queue_access(%s, %s, null, null, null, null)", [op, queue])
        assert "op must be send, archive, set, extend or head" in error
