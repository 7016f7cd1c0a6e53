"""The PGMQ archives of pgflow's queues partitioned by archived_at on the history's intervals: no
archived message is lost or moved by the conversion, new ones land in the partitions (through
pgflow.queue_access and through PGMQ's own pgmq.archive), retention drops whole partitions, and a
flow's deletion takes its partitions with it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from tests.sql.support import (
    archived_ids,
    claim_one,
    complete,
    db_error,
    make_flow,
    pgmq_relations,
    q,
    send_raw,
    start,
    step,
    val,
)

PRUNE = "select pgflow.prune_data_older_than(interval '3 days') as r"


def _kind(queue: str) -> str:
    return str(
        val("select relkind::text as k from pg_class where oid = to_regclass(%s)", [f"pgmq.a_{queue}"])
    )


def _partitions(queue: str) -> dict[str, str]:
    rows = q(
        "select c.relname as name, pg_get_expr(c.relpartbound, c.oid) as bound"
        " from pg_inherits as i join pg_class as c on c.oid = i.inhrelid"
        " where i.inhparent = to_regclass(%s)",
        [f"pgmq.a_{queue}"],
    )
    return {row["name"]: row["bound"] for row in rows}


def _home(queue: str, msg_id: int) -> str:
    return str(val(f"select tableoid::regclass::text as t from pgmq.a_{queue} where msg_id = %s", [msg_id]))


def _day(days_from_today: int) -> str:
    return (datetime.now(UTC) + timedelta(days=days_from_today)).strftime("%Y%m%d")


def _run_once(flow: str) -> int:
    """Start a one-step run and complete it; returns its archived message's id."""
    start(flow)
    record = claim_one(flow, "a")
    assert complete(record, 1) == "completed"
    return int(record["message_id"])


def test_an_archive_made_after_partitioning_is_partitioned_with_its_messages_in_place(
    partitioned: None,
) -> None:
    make_flow("arch_f", step("a"))
    before = _run_once("arch_f")
    assert _kind("arch_f") == "r", "a new queue's archive starts as PGMQ makes it"

    val("select pgflow.create_history_partitions()")

    assert _kind("arch_f") == "p"
    parts = _partitions("arch_f")
    assert parts["a_arch_f_default"] == "DEFAULT"
    assert parts["a_arch_f_old"].startswith("FOR VALUES FROM (MINVALUE) TO (")
    assert f"a_arch_f_p{_day(1)}" in parts and f"a_arch_f_p{_day(3)}" in parts
    assert _home("arch_f", before) == "pgmq.a_arch_f_old", "the archive as it was holds its rows"
    after = _run_once("arch_f")
    raw = send_raw("arch_f", {"raw": True})
    q("select pgmq.archive('arch_f', array[%s]::bigint[])", [raw])
    assert archived_ids("arch_f") == {before, after, raw}
    assert val("select count(*) as n from pgmq.q_arch_f") == 0
    assert (
        val("select to_regclass('pgmq.archived_at_idx_arch_f')::text as i") == "pgmq.archived_at_idx_arch_f"
    )
    assert val("select pgflow.create_history_partitions() as n") == 0, "nothing is missing the second time"


def test_an_empty_archive_gets_no_old_partition_and_archives_into_todays(partitioned: None) -> None:
    make_flow("arch_g", step("a"))
    val("select pgflow.create_history_partitions()")
    parts = _partitions("arch_g")
    assert "a_arch_g_old" not in parts
    assert {f"a_arch_g_p{_day(offset)}" for offset in range(4)} <= set(parts)
    msg_id = _run_once("arch_g")
    assert _home("arch_g", msg_id) == f"pgmq.a_arch_g_p{_day(0)}"


def test_retention_drops_old_archive_partitions_and_counts_their_messages(partitioned: None) -> None:
    make_flow("arch_r", step("a"))
    val("select pgflow.create_history_partitions(now() - interval '10 days')")
    old_a, old_b, recent, today, ancient = (_run_once("arch_r") for _ in range(5))
    for msg_id, days in ((old_a, 9), (old_b, 9), (recent, 1), (ancient, 30)):
        q(
            "update pgmq.a_arch_r set archived_at = now() - make_interval(days => %s) where msg_id = %s",
            [days, msg_id],
        )
    old_home = _home("arch_r", old_a)
    assert old_home == f"pgmq.a_arch_r_p{_day(-9)}" and _home("arch_r", ancient) == "pgmq.a_arch_r_default"

    result = val(PRUNE)

    assert result["archived_messages"] == 3
    assert old_home.removeprefix("pgmq.") not in _partitions("arch_r"), "the old interval is dropped whole"
    assert f"a_arch_r_p{_day(-1)}" in _partitions("arch_r")
    assert archived_ids("arch_r") == {recent, today}
    assert val(PRUNE)["archived_messages"] == 0


def test_a_history_partitioned_before_gets_its_archives_partitioned_on_request(partitioned: None) -> None:
    q("update pgflow.history_partitioning set archives = false")
    make_flow("arch_h", step("a"))
    kept = _run_once("arch_h")
    val("select pgflow.create_history_partitions()")
    assert _kind("arch_h") == "r", "without the request the archives stay as they are"

    plan = [row["s"] for row in q("select s from pgflow.partition_archives(false) as s")]
    assert plan[0] == "update pgflow.history_partitioning set archives = true"
    assert "select pgflow.partition_queue_archive('arch_h')" in plan
    assert _kind("arch_h") == "r", "the plan changes nothing"

    q("select count(*) from pgflow.partition_archives(true)")
    assert _kind("arch_h") == "p" and archived_ids("arch_h") == {kept}
    assert "already partitioned" in db_error("select pgflow.partition_archives(true)")


def test_archives_cannot_be_partitioned_without_a_partitioned_history() -> None:
    if val("select exists (select 1 from pgflow.history_partitioning) as p"):
        pytest.skip("the test database is partitioned already (--partitioned-history)")
    assert "run pgflow_partition first" in db_error("select pgflow.partition_archives(false)")
    make_flow("arch_n", step("a"))
    assert "run pgflow_partition first" in db_error("select pgflow.partition_queue_archive('arch_n')")


def test_deleting_a_flow_drops_its_archive_partitions(partitioned: None) -> None:
    make_flow("arch_d", step("a"))
    _run_once("arch_d")
    val("select pgflow.create_history_partitions()")
    assert len(_partitions("arch_d")) >= 5
    q("select pgflow.delete_flow_and_data('arch_d')")
    assert not {name for name in pgmq_relations() if "arch_d" in name}


def test_an_archive_not_laid_out_as_pgmq_makes_it_is_left_alone_and_the_others_go_on(
    partitioned: None,
) -> None:
    make_flow("arch_odd", step("a"))
    make_flow("arch_ok", step("a"))
    q("alter table pgmq.a_arch_odd rename column archived_at to stored_at")
    val("select pgflow.create_history_partitions()")
    assert _kind("arch_odd") == "r" and _kind("arch_ok") == "p"
    assert val("select pgflow.partition_queue_archive('arch_odd') as done") is False
