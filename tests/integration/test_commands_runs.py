"""``pgflow_runs``: listing with filters, one run with steps and tasks, JSON ids as strings."""

from __future__ import annotations

import json
import uuid
from datetime import timedelta
from typing import Any

import pytest
from django.core.management.base import CommandError

from pgflow_django import get_run, start_flow
from pgflow_django.flows.compiler import compile_flow
from pgflow_django.management.layout import local_time
from tests.integration import commands_flows
from tests.integration.commands_support import call, manage_in_process, stderr_lines
from tests.sql import support


@pytest.fixture
def runs() -> dict[str, uuid.UUID]:
    """A completed greet run, a started one, a failed boom run: all driven through the SQL API."""
    compile_flow(commands_flows.greet)
    compile_flow(commands_flows.boom)
    done = start_flow("cmd_greet", {"name": "ada"})
    support.run_step("cmd_greet", "hello", {"greeting": "hello ada"})
    support.run_step("cmd_greet", "shout", "HELLO ADA")
    going = start_flow("cmd_greet", {"name": "bob"})
    failed = start_flow("cmd_boom", {})
    assert support.fail(support.claim_one("cmd_boom"), "boom on purpose") == "failed"
    return {"completed": done, "started": going, "failed": failed}


def listed(*args: str) -> list[dict[str, Any]]:
    out, _ = call("pgflow_runs", "--format", "json", *args)
    result: list[dict[str, Any]] = json.loads(out)
    return result


def test_lists_runs_newest_first_as_json(runs: dict[str, uuid.UUID]) -> None:
    items = listed("--limit", "100")
    ours = [item for item in items if item["flow_slug"].startswith("cmd_")]
    assert {item["run_id"] for item in ours} == {str(run_id) for run_id in runs.values()}
    assert all(isinstance(item["run_id"], str) for item in items)
    by_id = {item["run_id"]: item for item in ours}
    assert by_id[str(runs["completed"])]["status"] == "completed"
    assert by_id[str(runs["failed"])]["error_message"].endswith("boom on purpose")
    started = [item["started_at"] for item in items]
    assert started == sorted(started, reverse=True)


def test_the_list_shows_each_runs_priority(
    runs: dict[str, uuid.UUID], monkeypatch: pytest.MonkeyPatch
) -> None:
    """As a table, in a terminal wide enough for one (test_commands_80_columns: the records at 80)."""
    monkeypatch.setenv("COLUMNS", "160")
    urgent = start_flow("cmd_greet", {"name": "eve"}, priority=75)
    by_id = {item["run_id"]: item for item in listed("--flow", "cmd_greet")}
    assert by_id[str(urgent)]["priority"] == 75
    assert by_id[str(runs["started"])]["priority"] is None, "started without one: the defaults"
    out, _ = call("pgflow_runs", "--flow", "cmd_greet")
    assert "priority" in out.splitlines()[0]
    assert any(str(urgent) in line and " 75 " in line for line in out.splitlines())
    assert any(str(runs["started"]) in line and "default" in line for line in out.splitlines())


def test_filters_by_flow_status_and_limit(runs: dict[str, uuid.UUID]) -> None:
    assert {item["run_id"] for item in listed("--flow", "cmd_boom")} == {str(runs["failed"])}
    greet_started = listed("--flow", "cmd_greet", "--status", "started")
    assert [item["run_id"] for item in greet_started] == [str(runs["started"])]
    assert len(listed("--flow", "cmd_greet", "--limit", "1")) == 1
    assert listed("--flow", "cmd_boom", "--status", "completed") == []


def test_a_flow_that_does_not_exist_is_refused_not_an_empty_list(runs: dict[str, uuid.UUID]) -> None:
    for args in (("--flow", "cmd_nothing"), ("--flow", "cmd_nothing", "--format", "json")):
        with pytest.raises(CommandError) as caught:
            call("pgflow_runs", *args)
        assert caught.value.returncode == 2
        assert str(caught.value).startswith("--flow: no flow 'cmd_nothing' (known flows: cmd_boom, cmd_greet")
    with pytest.raises(CommandError, match=r"did you mean 'cmd_greet'\?$"):
        call("pgflow_runs", "--flow", "cmd_greeet")


def test_text_list(runs: dict[str, uuid.UUID]) -> None:
    out, _ = call("pgflow_runs", "--flow", "cmd_greet")
    assert str(runs["completed"]) in out and str(runs["started"]) in out
    assert "completed" in out
    empty, _ = call("pgflow_runs", "--flow", "cmd_boom", "--status", "started")
    assert empty.strip() == "no runs matching the filters"


def test_one_run_as_json_with_steps_and_tasks(runs: dict[str, uuid.UUID]) -> None:
    out, _ = call("pgflow_runs", str(runs["completed"]), "--format", "json")
    view = json.loads(out)
    assert view["run_id"] == str(runs["completed"])
    assert view["status"] == "completed"
    assert view["output"] == {"shout": "HELLO ADA"}
    assert [step["step_slug"] for step in view["steps"]] == ["hello", "shout"]
    assert [(task["step_slug"], task["status"]) for task in view["tasks"]] == [
        ("hello", "completed"),
        ("shout", "completed"),
    ]
    for task in view["tasks"]:
        assert isinstance(task["message_id"], str) and task["message_id"].isdigit()
        assert isinstance(task["last_worker_id"], str)


def test_one_run_as_text(runs: dict[str, uuid.UUID]) -> None:
    out, _ = call("pgflow_runs", str(runs["failed"]), "--tasks")
    assert f"run {runs['failed']} of cmd_boom: failed" in out
    assert "explode" in out
    assert "boom on purpose" in out
    assert "message id" in out


def test_a_delayed_run_says_until_when_it_waits_in_every_form() -> None:
    """``start_flow(delay=...)``: started, yet nothing of it runs before its time."""
    compile_flow(commands_flows.greet)
    delayed = start_flow("cmd_greet", {"name": "later"}, delay=timedelta(hours=1))
    running = start_flow("cmd_greet", {"name": "now"})
    due = support.run(delayed)["not_before"]
    shown = local_time(due)
    records = manage_in_process("pgflow_runs", env={"COLUMNS": "80"})
    assert f"status: delayed until {shown}" in records.stdout, records.stdout
    assert records.stdout.count("status: started") == 1, "the running one"
    table = manage_in_process("pgflow_runs", env={"COLUMNS": "200"})
    (line,) = [line for line in table.stdout.splitlines() if str(delayed) in line]
    assert f"delayed until {shown}" in line
    items = {item["run_id"]: item for item in listed()}
    assert items[str(delayed)]["status"] == "started", "its status is the engine's"
    assert items[str(delayed)]["delayed_until"] == items[str(delayed)]["not_before"] == due.isoformat()
    assert (items[str(running)]["delayed_until"], items[str(running)]["not_before"]) == (None, None)
    out, _ = call("pgflow_runs", str(delayed))
    assert out.splitlines()[:2] == [
        f"run {delayed} of cmd_greet: started",
        f"delayed until {local_time(due, zone=True)} (pgflow_run_now starts it now)",
    ]
    view = json.loads(call("pgflow_runs", str(delayed), "--format", "json")[0])
    assert view["delayed_until"] == view["not_before"] == due.isoformat()
    assert get_run(delayed).delayed_until == due and get_run(running).delayed_until is None
    support.q("update pgflow.runs set not_before = now() - interval '1 minute' where run_id = %s", [delayed])
    assert items_of(listed(), delayed)["delayed_until"] is None, "its time has come: it is just started"
    assert "delayed" not in call("pgflow_runs", str(delayed))[0]


def items_of(items: list[dict[str, Any]], run_id: uuid.UUID) -> dict[str, Any]:
    (item,) = [item for item in items if item["run_id"] == str(run_id)]
    return item


def test_unknown_run() -> None:
    with pytest.raises(CommandError, match="no run 00000000-0000-0000-0000-000000000000"):
        call("pgflow_runs", "00000000-0000-0000-0000-000000000000")


def test_filters_do_not_apply_to_one_run(runs: dict[str, uuid.UUID]) -> None:
    with pytest.raises(CommandError, match="--flow, --limit only filter the list of runs"):
        call("pgflow_runs", str(runs["started"]), "--flow", "cmd_greet", "--limit", "2")


def test_tasks_needs_a_run() -> None:
    with pytest.raises(CommandError, match="--tasks needs a RUN_ID"):
        call("pgflow_runs", "--tasks")


def test_bad_run_id() -> None:
    with pytest.raises(CommandError, match="'xyz' is not a UUID"):
        call("pgflow_runs", "xyz")


def test_json_and_exit_codes() -> None:
    listed_ok = manage_in_process("pgflow_runs", "--format", "json", "--limit", "5")
    assert listed_ok.returncode == 0, listed_ok.stderr
    assert isinstance(json.loads(listed_ok.stdout), list)

    missing = manage_in_process("pgflow_runs", str(uuid.uuid4()))
    assert missing.returncode == 1
    assert len(stderr_lines(missing)) == 1
