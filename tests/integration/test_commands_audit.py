"""``manage.py pgflow_audit``: the upgrade audit as a read-only command with text or JSON output.

The hazards are made with PGMQ directly (a case alias, a message no task knows), which is possible on
an upgraded database too; the checks of a baseline database are covered by tests/migration.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection

from pgflow_django.db.upgrade import load_audit_checks
from pgflow_django.flows.compiler import compile_flow
from tests.integration import commands_flows
from tests.integration.commands_support import drop_command_flows, manage_in_process, stderr_lines
from tests.support.db import scalar

CHECKS = [check.name for check in load_audit_checks()]
BIG_ID = 2**53 + 7


def audit(*args: str) -> tuple[str, str, CommandError | None]:
    """Run the command in-process; a failure is returned, with what it printed before failing."""
    out, err = StringIO(), StringIO()
    try:
        call_command("pgflow_audit", *args, stdout=out, stderr=err)
    except CommandError as exc:
        return out.getvalue(), err.getvalue(), exc
    return out.getvalue(), err.getvalue(), None


def make_alias() -> None:
    """Two metadata rows, 'CmdAlias' and 'cmdalias', naming the same queue tables."""
    with connection.cursor() as cursor:
        cursor.execute("select pgmq.create('cmdalias'), pgmq.create('CmdAlias')")


def drop_alias() -> None:
    with connection.cursor() as cursor:
        cursor.execute("delete from pgmq.meta where lower(queue_name) = 'cmdalias'")
        cursor.execute("drop table if exists pgmq.q_cmdalias, pgmq.a_cmdalias")


def test_a_clean_database_passes() -> None:
    out, err, failure = audit()
    assert failure is None
    assert out.strip() == f"pgflow audit: all {len(CHECKS)} checks passed; the database can be upgraded"
    assert err == ""


def test_json_lists_every_check() -> None:
    out, _, failure = audit("--format", "json")
    assert failure is None
    report = json.loads(out)
    assert report["ok"] is True
    assert [check["check"] for check in report["checks"]] == CHECKS
    assert all(check["problem_count"] == 0 and check["samples"] == [] for check in report["checks"])
    assert all(check["hint"] is None and check["description"] for check in report["checks"])


def test_problems_are_reported_and_exit_1() -> None:
    compile_flow(commands_flows.greet)
    make_alias()
    with connection.cursor() as cursor:
        cursor.execute("select setval('pgmq.q_cmd_greet_msg_id_seq', %s)", [BIG_ID - 1])
        cursor.execute(
            "select pgmq.send('cmd_greet', %s::jsonb)",
            [json.dumps({"flow_slug": "cmd_greet", "run_id": None, "step_slug": "hello", "task_index": 0})],
        )

    out, _, failure = audit()

    assert failure is not None and failure.returncode == 1
    assert str(failure).startswith(
        "2 of 10 checks found problems (case_alias_queues, unmatched_active_messages)"
    )
    assert "\ncase_alias_queues: 1 problem(s)\n" in out
    assert "  - queue_name=cmdalias spellings=CmdAlias, cmdalias\n" in out
    assert "delete from pgmq.meta where queue_name = 'CmdAlias'" in out
    assert f"  - queue_name=cmd_greet message_id={BIG_ID}\n" in out
    assert f"select pgmq.archive('cmd_greet', {BIG_ID}::bigint)" in out
    assert "passed: missing_queue_objects, duplicate_message_identities" in out


def test_json_carries_message_ids_as_exact_strings() -> None:
    compile_flow(commands_flows.greet)
    with connection.cursor() as cursor:
        cursor.execute("select setval('pgmq.q_cmd_greet_msg_id_seq', %s)", [BIG_ID - 1])
        cursor.execute("select pgmq.send('cmd_greet', '{\"not\": \"pgflow\"}'::jsonb)")

    out, _, failure = audit("--format", "json")

    assert failure is not None and failure.returncode == 1
    checks = {check["check"]: check for check in json.loads(out)["checks"]}
    unmatched = checks["unmatched_active_messages"]
    assert unmatched["ok"] is False and unmatched["problem_count"] == 1
    assert unmatched["samples"] == [{"queue_name": "cmd_greet", "message_id": str(BIG_ID)}]
    assert '"message_id": "9007199254740999"' in out
    assert unmatched["hint"].startswith("find out who sent it")


def test_the_audit_changes_nothing_and_leaves_the_transaction_writable() -> None:
    make_alias()
    before = scalar("select count(*) from pgmq.meta")
    _, _, failure = audit()
    assert failure is not None
    assert scalar("select count(*) from pgmq.meta") == before
    assert scalar("select current_setting('transaction_read_only')") == "off"
    drop_alias()


@pytest.fixture
def committed_alias(transactional_db: None) -> Iterator[None]:
    make_alias()
    yield
    drop_alias()
    drop_command_flows()


def test_exit_codes(committed_alias: None) -> None:
    blocked = manage_in_process("pgflow_audit", "--format", "json")
    assert blocked.returncode == 1, blocked.stderr
    assert json.loads(blocked.stdout)["ok"] is False
    assert stderr_lines(blocked) == [
        "CommandError: 1 of 10 checks found problems (case_alias_queues); "
        "repair them before migrating (docs/upgrading.md)"
    ]
    drop_alias()
    passed = manage_in_process("pgflow_audit")
    assert passed.returncode == 0, passed.stderr
    assert passed.stderr == ""
    assert "all 10 checks passed" in passed.stdout


def test_bad_arguments_exit_2() -> None:
    result = manage_in_process("pgflow_audit", "--format", "yaml")
    assert result.returncode == 2
    assert len(stderr_lines(result)) == 1
    assert "invalid choice: 'yaml'" in result.stderr


def test_help_has_examples() -> None:
    from pgflow_django.management.commands.pgflow_audit import Command

    text = Command().create_parser("manage.py", "pgflow_audit").format_help()
    assert "manage.py pgflow_audit --format json" in text
    assert "exit codes: 0 every check passed; 1 a check found problems" in text
