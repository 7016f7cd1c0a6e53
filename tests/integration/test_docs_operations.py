"""docs/operations.md: every ``sql`` block runs on a migrated database; the deployment examples agree."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.db import connection

from pgflow_django import start_flow
from pgflow_django.flows.compiler import compile_flow
from tests.integration import commands_flows
from tests.sql import support
from tests.support.db import tuples

DOC = Path(__file__).resolve().parents[2] / "docs" / "operations.md"
SQL_BLOCKS = re.findall(r"```sql\n(.*?)```", DOC.read_text(encoding="utf-8"), re.DOTALL)


def block_titled(words: str) -> str:
    """The first ``sql`` block after the heading that contains ``words``."""
    text = DOC.read_text(encoding="utf-8")
    heading = re.search(rf"^#+ .*{re.escape(words)}.*$", text, re.MULTILINE)
    assert heading is not None, words
    found = re.search(r"```sql\n(.*?)```", text[heading.end() :], re.DOTALL)
    assert found is not None, words
    return found.group(1)


def test_the_page_has_the_monitoring_queries() -> None:
    assert len(SQL_BLOCKS) >= 5


@pytest.mark.parametrize("sql", SQL_BLOCKS, ids=[f"block{index}" for index in range(len(SQL_BLOCKS))])
def test_each_sql_block_runs(sql: str) -> None:
    compile_flow(commands_flows.greet)
    start_flow("cmd_greet", {"name": "ada"})
    tuples(sql)


def test_queue_depth_and_oldest_queued_task_see_a_waiting_run() -> None:
    compile_flow(commands_flows.greet)
    start_flow("cmd_greet", {"name": "ada"})
    depth = {row[0]: row[1] for row in tuples(block_titled("Queue depth per queue"))}
    assert depth["cmd_greet"] == 1
    oldest = {row[0]: row[1] for row in tuples(block_titled("Oldest queued task"))}
    assert oldest["cmd_greet"] == 1


def test_stalled_tasks_query_finds_a_task_past_its_timeout() -> None:
    compile_flow(commands_flows.greet)  # timeout 5 s
    start_flow("cmd_greet", {"name": "ada"})
    task = support.claim_one("cmd_greet")
    stalled = block_titled("Stalled tasks")
    assert [row for row in tuples(stalled) if row[1] == "cmd_greet"] == []
    with connection.cursor() as cursor:
        cursor.execute(
            "update pgflow.step_tasks set started_at = now() - interval '36 seconds' "
            "where flow_slug = 'cmd_greet' and status = 'started'"
        )
    found = [row for row in tuples(stalled) if row[1] == "cmd_greet"]
    assert [(row[2], row[-1]) for row in found] == [("hello", 5)], task


def test_kubernetes_grace_period_exceeds_the_shutdown_timeout() -> None:
    text = DOC.read_text(encoding="utf-8")
    grace = int(re.search(r"terminationGracePeriodSeconds: (\d+)", text).group(1))  # type: ignore[union-attr]
    shutdown = int(re.search(r'"--shutdown-timeout", "(\d+)"', text).group(1))  # type: ignore[union-attr]
    assert grace > shutdown
    stop = int(re.search(r"TimeoutStopSec=(\d+)", text).group(1))  # type: ignore[union-attr]
    unit_shutdown = int(re.search(r"ExecStart=.*pgflow_worker .*--shutdown-timeout (\d+)", text).group(1))  # type: ignore[union-attr]
    assert stop > unit_shutdown
