"""pgflow.queue_access beyond 32 queues: the branches move into the numbered functions
pgflow.queue_access_000 to _255 (a queue's is hashtext(queue) & 255), pgflow.queue_access dispatches
to them, a new or dropped queue rewrites only its own function, a write that finds nothing changed
writes nothing, and checking the queues reads pg_attribute by key (never once per queue)."""

from __future__ import annotations

import pytest

from tests.sql.queue_access.support import BRANCH_SOURCES, check_static_matches_dynamic
from tests.sql.support import q, val

INLINE = 32
"""Up to this many queues, pgflow.queue_access holds the branches itself."""

HOLDERS = (
    "select p.proname as name, p.ctid::text as version, p.prosrc as source from pg_proc as p"
    " where p.pronamespace = 'pgflow'::regnamespace and p.proname ~ '^queue_access(_[0-9]{3})?$'"
)


def queue_count() -> int:
    return int(val("select count(*) as value from pgflow.engine_queues()"))


def make_queues(prefix: str, at_least: int, total: int = INLINE + 8) -> list[str]:
    """One-step flows ``<prefix>_1`` ... (their queues have the flows' names), at least ``at_least`` of
    them and enough to bring the database to ``total`` queues; made in one statement."""
    count = max(at_least, total - queue_count())
    q(
        "select count(*) from (select pgflow.create_flow(%s || i), pgflow.add_step(%s || i, 'a')"
        " from generate_series(1, %s) as i) as made",
        [f"{prefix}_", f"{prefix}_", count],
    )
    return [f"{prefix}_{i}" for i in range(1, count + 1)]


def holders() -> dict[str, dict[str, str]]:
    """Every function that holds branches, by name: its row version (ctid: a rewrite, even in this
    transaction, makes a new one) and its text."""
    return {row["name"]: {"version": row["version"], "source": row["source"]} for row in q(HOLDERS)}


def function_of(queue: str) -> str:
    number = val("select lpad((hashtext(%s) & 255)::text, 3, '0') as value", [queue])
    return f"queue_access_{number}"


def branch(queue: str) -> str:
    return f"if v_queue = '{queue}' then"


def sent_by_branch(queue: str) -> bool:
    """Sends a message through pgflow.queue_access; a static branch returns the whole record, PGMQ's
    send_batch (a queue without a branch) only the message id."""
    read_ct = val(
        "select m.read_ct as value"
        " from pgflow.queue_access('send', %s, null, array[0], array['{}'::jsonb], null) as m",
        [queue],
    )
    return read_ct is not None


def changed(before: dict[str, dict[str, str]], after: dict[str, dict[str, str]]) -> list[str]:
    return sorted(name for name in after if before.get(name, {}).get("version") != after[name]["version"])


def test_beyond_32_queues_each_branch_is_in_the_function_of_its_number() -> None:
    queues = make_queues("qa_many", 2)
    assert queue_count() > INLINE
    written = holders()
    assert len(written) == 257
    dispatcher = written["queue_access"]["source"]
    assert "v_bucket constant integer := hashtext(lower(queue_name)) & 255" in dispatcher
    assert "if v_queue = " not in dispatcher
    for queue in queues:
        assert [name for name, function in written.items() if branch(queue) in function["source"]] == [
            function_of(queue)
        ]
        assert sent_by_branch(queue)
    q("select pgmq.create('qa_many_raw')")
    assert not sent_by_branch("qa_many_raw"), "a queue pgflow does not know goes through PGMQ's functions"
    check_static_matches_dynamic(q, queues[0], "qa_many_raw")


def test_a_new_or_dropped_queue_rewrites_only_its_own_function() -> None:
    make_queues("qa_one", 1)
    before = holders()
    q("select pgflow.create_flow('qa_one_more'), pgflow.add_step('qa_one_more', 'a')")
    created = holders()
    assert changed(before, created) == [function_of("qa_one_more")]
    assert branch("qa_one_more") in created[function_of("qa_one_more")]["source"]
    assert sent_by_branch("qa_one_more")

    q("select pgflow.delete_flow_and_data('qa_one_more')")
    deleted = holders()
    assert changed(created, deleted) == [function_of("qa_one_more")]
    assert branch("qa_one_more") not in str(val(BRANCH_SOURCES))


def test_a_write_that_finds_nothing_changed_writes_nothing() -> None:
    make_queues("qa_still", 1)
    before = holders()
    assert "qa_still_1" in val("select pgflow.write_queue_access() as value")
    assert changed(before, holders()) == []


def test_at_32_queues_or_fewer_the_branches_go_back_into_queue_access() -> None:
    if queue_count() > INLINE - 2:
        pytest.skip("the test database already holds more than 30 queues")
    queues = make_queues("qa_back", 2)
    for queue in queues[: queue_count() - INLINE]:
        q("select pgflow.delete_flow_and_data(%s)", [queue])
    assert queue_count() == INLINE
    written = holders()
    assert len(written) == 257, "the numbered functions stay, for sessions running the previous dispatcher"
    left = queues[-1]
    assert branch(left) in written["queue_access"]["source"]
    assert [name for name, function in written.items() if "if v_queue = " in function["source"]] == [
        "queue_access"
    ]
    assert sent_by_branch(left)


def test_checking_the_queues_reads_pg_attribute_by_key_not_once_per_queue() -> None:
    """The check reads at most one pass over pg_attribute plus a few rows per queue; the check it
    replaced read all of pg_attribute once per queue (quadratic, as pg_attribute grows with them)."""
    make_queues("qa_linear", 1)
    queues = queue_count()
    attributes = int(val("select count(*) as value from pg_attribute"))
    read = (
        "select coalesce(sum(seq_tup_read + coalesce(idx_tup_fetch, 0)), 0)::bigint as value"
        " from pg_stat_xact_sys_tables where relname = 'pg_attribute'"
    )
    before = int(val(read))
    val("select cardinality(pgflow.write_queue_access()) as value")
    rows_read = int(val(read)) - before
    assert 0 < rows_read <= attributes + 40 * queues, (rows_read, attributes, queues)
