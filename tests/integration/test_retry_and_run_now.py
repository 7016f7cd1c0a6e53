"""Retry and run now everywhere (issue 41, item 4): ``pgflow_django.retry_run`` and ``run_now`` from
Python, ``manage.py pgflow_retry`` and ``pgflow_run_now`` (runs by id, or chosen by ``--flow`` across
its versions with a count and a confirmation), and the admin's actions, each on its own permission.
Every path makes the same call on the real engine."""

from __future__ import annotations

import re
import uuid
from datetime import timedelta
from io import StringIO

import pytest
from django.contrib.admin.models import LogEntry
from django.core.management.base import CommandError
from django.db import transaction
from django.utils import timezone

import pgflow_django
from pgflow_django import Flow, RetryRefused, RunNotFound, RunNowRefused, retry_run, run_now, start_flow
from pgflow_django.flows.compiler import compile_flow
from pgflow_django.management.layout import local_time
from testproject.example.tasks import add
from tests.integration import commands_flows
from tests.integration.commands_support import call, manage_in_process, stderr_lines
from tests.integration.test_admin import said
from tests.integration.test_admin_permissions import act, operator
from tests.sql import support
from tests.tasks_support import backend

FLOW = "rr_orders"


def _release(number: int) -> Flow:
    """Version ``number`` of the test flow: one more step per release, the first one fails once claimed."""
    flow = Flow(FLOW, max_attempts=1, timeout=5)
    for index in range(number):
        flow.step(slug=f"step_{index}")(commands_flows.explode)
    return flow


class Terminal(StringIO):
    """Standard input that is a terminal, answering with the given text."""

    def isatty(self) -> bool:
        return True


@pytest.fixture
def versions() -> tuple[str, str]:
    """Two versions of ``rr_orders`` (stored as ``rr_orders`` and ``rr_orders___v2``)."""
    first = compile_flow(_release(1)).flow_slug
    second = compile_flow(_release(2)).flow_slug
    assert (first, second) == (FLOW, f"{FLOW}___v2")
    return first, second


def _failed(stored_slug: str) -> uuid.UUID:
    run_id = support.start(stored_slug)
    records = support.claim(stored_slug)
    assert records and support.fail(records[0], "boom") == "failed"
    return run_id


def _delayed(stored_slug: str, seconds: int = 3600) -> uuid.UUID:
    """A run of that very version, started ``seconds`` from now."""
    row = support.q1(
        "select run_id from pgflow.start_flow(%s, '{}'::jsonb, start_delay => %s)", [stored_slug, seconds]
    )
    return uuid.UUID(str(row["run_id"]))


def _status(run_id: uuid.UUID) -> str:
    return str(support.run(run_id)["status"])


def _hidden(run_id: uuid.UUID) -> list[bool]:
    """Per queued task of the run: whether its message is hidden now."""
    return [
        support.vt_in(task["queue_name"], task["message_id"]) > 0
        for task in support.tasks(run_id)
        if task["status"] == "queued"
    ]


# -- Python --------------------------------------------------------------------------------------------


def _snapshot(*run_ids: uuid.UUID) -> list[object]:
    """Everything a retry or a run now would change: the runs, their step states and tasks, and how
    long each queued task's message stays hidden."""
    return [
        (
            support.run(key),
            support.q("select * from pgflow.step_states where run_id = %s order by step_slug", [key]),
            support.tasks(key),
            _hidden(key),
        )
        for key in run_ids
        if support.q("select 1 from pgflow.runs where run_id = %s", [key])
    ]


def _completed(stored_slug: str) -> uuid.UUID:
    run_id = support.start(stored_slug)
    (record,) = support.claim(stored_slug)
    assert support.complete(record, 1) == "completed"
    assert _status(run_id) == "completed"
    return run_id


def _dry_and_real(command: str, run_id: uuid.UUID) -> tuple[list[str], list[str]]:
    """The stderr of ``command --dry-run RUN_ID`` and of ``command RUN_ID`` (both refused, exit 1), and
    the proof that the dry run changed nothing."""
    before = _snapshot(run_id)
    dry = manage_in_process(command, "--dry-run", str(run_id))
    assert _snapshot(run_id) == before, "a dry run changes nothing"
    real = manage_in_process(command, str(run_id))
    assert (dry.returncode, real.returncode) == (1, 1), (dry, real)
    assert dry.stdout == real.stdout == ""
    return stderr_lines(dry), stderr_lines(real)


def test_the_four_names_are_public() -> None:
    assert (pgflow_django.retry_run, pgflow_django.RetryRefused) == (retry_run, RetryRefused)
    assert (pgflow_django.run_now, pgflow_django.RunNowRefused) == (run_now, RunNowRefused)
    assert {"retry_run", "RetryRefused", "run_now", "RunNowRefused"} <= set(pgflow_django.__all__)


def test_run_now_makes_a_delayed_start_visible_in_the_callers_transaction() -> None:
    compile_flow(commands_flows.greet)
    with transaction.atomic():
        run_id = start_flow("cmd_greet", {"name": "ada"}, delay=timedelta(hours=1))
        assert _hidden(run_id) == [True]
        assert run_now(str(run_id)) == 1
        assert _hidden(run_id) == [False]
    assert support.run(run_id)["not_before"] is None
    assert run_now(run_id) == 0, "nothing is waiting any more"


def test_run_now_refuses_a_finished_run_and_an_unknown_one() -> None:
    compile_flow(commands_flows.greet)
    run_id = start_flow("cmd_greet", {"name": "ada"})
    support.q("select pgflow.cancel_run(%s)", [run_id])
    with pytest.raises(RunNowRefused, match=f"^run {run_id} is failed: nothing of it waits to run; retry it"):
        run_now(run_id)
    missing = uuid.uuid4()
    with pytest.raises(RunNotFound, match=f"^no run {missing}: check the id"):
        run_now(missing)
    with pytest.raises(ValueError, match="is not a UUID"):
        run_now("nope")


def test_run_now_reaches_a_django_task_whose_run_after_delays_it() -> None:
    """The tasks backend maps ``run_after`` to a delayed run of the task's flow."""
    backend()._compiled.clear()  # another test's compilations may name flows that are gone
    try:
        result = add.using(run_after=timezone.now() + timedelta(hours=2)).enqueue(1, 2)
        run_id = uuid.UUID(str(result.id))
        assert _hidden(run_id) == [True]
        assert run_now(run_id) == 1
        assert _hidden(run_id) == [False]
    finally:
        backend()._compiled.clear()


# -- pgflow_retry --------------------------------------------------------------------------------------


@pytest.mark.usefixtures("versions")
class TestRetryCommand:
    def test_retries_one_run_by_id(self) -> None:
        run_id = _failed(FLOW)
        out, err = call("pgflow_retry", str(run_id))
        assert (out, err) == (f"retried run {run_id}: 1 task(s) queued again\n", "")
        assert _status(run_id) == "started"

    def test_a_refused_run_is_one_line_and_exit_1(self) -> None:
        run_id = support.start(FLOW)
        result = manage_in_process("pgflow_retry", str(run_id))
        assert result.returncode == 1 and result.stdout == ""
        assert stderr_lines(result) == [
            f"CommandError: run {run_id} is started: only a failed or cancelled run can be retried"
        ]

    def test_several_runs_one_line_each_and_exit_1_when_one_was_not_retried(self) -> None:
        failed, missing = _failed(FLOW), uuid.uuid4()
        result = manage_in_process("pgflow_retry", str(failed), str(missing), str(failed))
        assert result.returncode == 1
        assert result.stdout == f"retried run {failed}: 1 task(s) queued again\n", "a repeated id counts once"
        lines = stderr_lines(result)
        assert lines[0].startswith(f"no run {missing}: check the id")
        assert lines[1:] == ["CommandError: 1 of 2 runs were not changed (see above)"]

    def test_flow_chooses_the_failed_runs_of_every_version_with_yes(self) -> None:
        first, second = _failed(FLOW), _failed(f"{FLOW}___v2")
        cancelled = support.start(FLOW)
        support.q("select pgflow.cancel_run(%s)", [cancelled])
        started = support.start(FLOW)
        out, err = call("pgflow_retry", "--flow", FLOW, "--yes", stdin=StringIO())
        lines = out.splitlines()
        assert lines[0] == f"2 failed run(s) of flow '{FLOW}', to retry from where they failed:"
        assert str(first) in lines[2] and str(second) in lines[3]
        assert lines[-2:] == [
            f"retried run {first}: 1 task(s) queued again",
            f"retried run {second}: 2 task(s) queued again",
        ]
        assert err == ""
        assert [_status(r) for r in (first, second, cancelled, started)] == [
            "started",
            "started",
            "failed",
            "started",
        ]

    def test_failed_since_keeps_the_recent_failures(self) -> None:
        old, recent = _failed(FLOW), _failed(FLOW)
        support.q("update pgflow.runs set failed_at = now() - interval '2 hours' where run_id = %s", [old])
        out, _ = call("pgflow_retry", "--flow", FLOW, "--failed-since", "1h", "--yes")
        assert out.splitlines()[0].startswith(f"1 failed run(s) of flow '{FLOW}' (since ")
        assert (_status(old), _status(recent)) == ("failed", "started")

    def test_without_a_terminal_and_without_yes_it_refuses_in_one_line(self) -> None:
        run_id = _failed(FLOW)
        result = manage_in_process("pgflow_retry", "--flow", FLOW, "--failed-since", "1h")
        assert result.returncode == 1
        assert stderr_lines(result) == [
            "CommandError: refusing to change 1 run(s) without confirmation: standard input is not a "
            "terminal; pass --yes to go ahead"
        ]
        assert _status(run_id) == "failed"

    def test_a_terminal_asks_first(self) -> None:
        run_id = _failed(FLOW)
        with pytest.raises(CommandError, match="not confirmed; no run was changed"):
            call("pgflow_retry", "--flow", FLOW, stdin=Terminal("n\n"))
        assert _status(run_id) == "failed"
        out, _ = call("pgflow_retry", "--flow", FLOW, stdin=Terminal("y\n"))
        assert "Retry these 1 run(s) from where they failed? [y/N] " in out
        assert out.endswith(f"retried run {run_id}: 1 task(s) queued again\n")
        assert _status(run_id) == "started"

    def test_dry_run_lists_and_changes_nothing(self) -> None:
        run_id = _failed(FLOW)
        out, _ = call("pgflow_retry", "--flow", FLOW, "--dry-run")
        assert str(run_id) in out and "nothing changed (--dry-run)" in out
        assert _status(run_id) == "failed"

    def test_dry_run_by_id_counts_what_the_retry_would_queue_and_changes_nothing(self) -> None:
        run_id = _failed(f"{FLOW}___v2")
        before = _snapshot(run_id)
        out, err = call("pgflow_retry", str(run_id), "--dry-run")
        assert (out, err) == (
            f"would retry run {run_id}: 2 task(s) would be queued again\nnothing changed (--dry-run)\n",
            "",
        )
        assert _snapshot(run_id) == before
        out, _ = call("pgflow_retry", str(run_id))
        assert out == f"retried run {run_id}: 2 task(s) queued again\n", "the count the dry run gave"

    @pytest.mark.parametrize("case", ["started", "completed", "failed outside its tasks", "unknown"])
    def test_dry_run_refuses_what_the_retry_refuses_in_its_words(self, case: str) -> None:
        if case == "started":
            run_id = support.start(FLOW)
        elif case == "completed":
            run_id = _completed(FLOW)
        elif case == "unknown":
            run_id = uuid.uuid4()
        else:  # its failed step has no failed task left: the retry would fail the same way
            run_id = _failed(FLOW)
            support.q("update pgflow.step_tasks set status = 'completed' where run_id = %s", [run_id])
        dry, real = _dry_and_real("pgflow_retry", run_id)
        assert dry == real, "the same reason, the same exit code"
        assert len(dry) == 1 and str(run_id) in dry[0], dry

    def test_dry_run_of_several_runs_says_which_would_be_refused_and_exits_1(self) -> None:
        failed, started, missing = _failed(FLOW), support.start(FLOW), uuid.uuid4()
        before = _snapshot(failed, started)
        result = manage_in_process("pgflow_retry", "--dry-run", str(failed), str(started), str(missing))
        assert result.returncode == 1
        assert result.stdout == (
            f"would retry run {failed}: 1 task(s) would be queued again\nnothing changed (--dry-run)\n"
        )
        lines = stderr_lines(result)
        assert lines[0] == f"run {started} is started: only a failed or cancelled run can be retried"
        assert lines[1].startswith(f"no run {missing}: check the id")
        assert lines[2:] == ["CommandError: 2 of 3 runs would not be changed (see above)"]
        assert _snapshot(failed, started) == before

    def test_no_failed_run_is_not_an_error(self) -> None:
        out, _ = call("pgflow_retry", "--flow", FLOW, "--failed-since", "5m")
        assert out.startswith(f"no failed run(s) of flow '{FLOW}' (since ")
        assert " ".join(out.split()).endswith(": nothing to retry")

    def test_lines_fit_80_columns(self) -> None:
        for _ in range(3):
            _failed(f"{FLOW}___v2")
        result = manage_in_process("pgflow_retry", "--flow", FLOW, "--yes", env={"COLUMNS": "80"})
        assert result.returncode == 0, result.stderr
        assert [line for line in result.stdout.splitlines() if len(line) > 80] == []

    def test_the_failed_since_header_fits_80_columns_with_its_time_zone(self) -> None:
        _failed(FLOW)
        result = manage_in_process(
            "pgflow_retry", "--flow", FLOW, "--failed-since", "1h", "--dry-run", env={"COLUMNS": "80"}
        )
        assert result.returncode == 0, result.stderr
        lines = result.stdout.splitlines()
        assert [line for line in lines if len(line) > 80] == []
        header = " ".join(lines[:2])
        assert re.fullmatch(
            rf"1 failed run\(s\) of flow '{FLOW}' \(since \d{{4}}-\d\d-\d\d \d\d:\d\d:\d\d UTC\), to retry "
            "from where they failed:",
            header,
        ), lines[:2]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["pgflow_retry"], "give the id of a run to retry, or --flow FLOW"),
        (["pgflow_retry", "nope"], "'nope' is not a UUID"),
        (["pgflow_retry", str(uuid.uuid4()), "--flow", "x"], "give RUN_IDs or --flow FLOW, not both"),
        (
            ["pgflow_retry", str(uuid.uuid4()), "--failed-since", "1h"],
            "--failed-since only narrows --flow; leave it out with RUN_IDs",
        ),
        (["pgflow_retry", str(uuid.uuid4()), "--yes"], "--yes confirms --flow; leave it out with RUN_IDs"),
        (["pgflow_retry", "--failed-since", "1h"], "--failed-since needs --flow FLOW"),
        (["pgflow_retry", "--yes"], "--yes needs --flow FLOW"),
        (["pgflow_retry", "--failed-since", "1h", "--yes"], "--failed-since and --yes need --flow FLOW"),
        (["pgflow_retry", "--flow", "x", "--failed-since=-1h"], "invalid duration '-1h'"),
        (["pgflow_retry", "--flow", "x", "--failed-since", "-1h"], "--failed-since: expected one argument"),
        (
            ["pgflow_run_now", "--flow", "x", "--failed-since", "1h"],
            "manage.py pgflow_run_now: error: unrecognized arguments: --failed-since (see --help)",
        ),
        (
            ["pgflow_run_now", "nope"],
            "manage.py pgflow_run_now: error: argument RUN_ID: 'nope' is not a UUID",
        ),
        (["pgflow_retry", "--flow", "x", "--failed-since", "1y"], "invalid duration '1y'"),
        (["pgflow_retry", "--flow", "no_such_flow"], "--flow: no flow 'no_such_flow'"),
        (["pgflow_retry", "--flow", "Bad-Slug"], "--flow"),
        (["pgflow_run_now"], "give the id of a run to run now, or --flow FLOW"),
        (["pgflow_run_now", "--flow", "x", str(uuid.uuid4())], "give RUN_IDs or --flow FLOW, not both"),
        (["pgflow_run_now", "--flow", "no_such_flow"], "--flow: no flow 'no_such_flow'"),
    ],
)
def test_bad_arguments_are_one_line_and_exit_2(args: list[str], message: str) -> None:
    result = manage_in_process(*args)
    assert result.returncode == 2, result.stderr
    lines = stderr_lines(result)
    assert len(lines) == 1 and message in lines[0], result.stderr
    assert result.stdout == ""


@pytest.mark.parametrize("command", ["pgflow_retry", "pgflow_run_now"])
def test_help_explains_with_examples_and_exit_codes(command: str) -> None:
    result = manage_in_process(command, "--help", env={"COLUMNS": "80"})
    assert result.returncode == 0 and result.stderr == ""
    assert "examples:" in result.stdout and "exit codes:" in result.stdout
    assert [line for line in result.stdout.splitlines() if len(line) > 80] == []


# -- pgflow_run_now ------------------------------------------------------------------------------------


@pytest.mark.usefixtures("versions")
class TestRunNowCommand:
    def test_one_run_by_id(self) -> None:
        run_id = _delayed(FLOW)
        out, err = call("pgflow_run_now", str(run_id))
        assert (out, err) == (f"run {run_id}: 1 message(s) visible now\n", "")
        assert _hidden(run_id) == [False]
        out, _ = call("pgflow_run_now", str(run_id))
        assert out == f"run {run_id}: nothing was waiting\n"

    def test_a_finished_run_is_one_line_and_exit_1(self) -> None:
        run_id = _failed(FLOW)
        result = manage_in_process("pgflow_run_now", str(run_id))
        assert result.returncode == 1
        assert stderr_lines(result) == [
            f"CommandError: run {run_id} is failed: nothing of it waits to run; retry it to run its failed "
            "tasks again"
        ]

    def test_dry_run_by_id_counts_what_would_become_visible_and_changes_nothing(self) -> None:
        delayed, ready = _delayed(f"{FLOW}___v2"), support.start(FLOW)
        before = _snapshot(delayed, ready)
        result = manage_in_process("pgflow_run_now", "--dry-run", str(delayed), str(ready))
        assert (result.returncode, result.stderr) == (0, "")
        assert result.stdout.splitlines() == [
            f"run {delayed}: 2 message(s) would become visible now",
            f"run {ready}: nothing is waiting",
            "nothing changed (--dry-run)",
        ]
        assert _snapshot(delayed, ready) == before
        out, _ = call("pgflow_run_now", str(delayed))
        assert out == f"run {delayed}: 2 message(s) visible now\n", "the count the dry run gave"

    @pytest.mark.parametrize("case", ["failed", "completed", "unknown"])
    def test_dry_run_refuses_what_run_now_refuses_in_its_words(self, case: str) -> None:
        run_id = {"failed": _failed, "completed": _completed}.get(case, lambda _: uuid.uuid4())(FLOW)
        dry, real = _dry_and_real("pgflow_run_now", run_id)
        assert dry == real, "the same reason, the same exit code"
        assert len(dry) == 1 and str(run_id) in dry[0], dry

    def test_flow_chooses_the_runs_with_waiting_work_of_every_version(self) -> None:
        first, second = _delayed(FLOW), _delayed(f"{FLOW}___v2")
        ready = support.start(FLOW)
        refused = manage_in_process("pgflow_run_now", "--flow", FLOW)
        assert refused.returncode == 1 and "pass --yes to go ahead" in refused.stderr
        assert _hidden(first) == [True]
        (task,) = support.tasks(first)
        due = support.q1(f"select vt from pgmq.q_{FLOW} where msg_id = %s", [task["message_id"]])["vt"]
        out, _ = call("pgflow_run_now", "--flow", FLOW, "--yes")
        lines = out.splitlines()
        assert lines[0] == f"2 run(s) with waiting work of flow '{FLOW}', to run now:"
        assert lines[1].split() == ["RUN", "FLOW", "WAITS", "UNTIL"], "when each would run anyway"
        assert local_time(due) in lines[2], lines[2]
        assert lines[-2:] == [
            f"run {first}: 1 message(s) visible now",
            f"run {second}: 2 message(s) visible now",
        ]
        assert _hidden(first) == [False] and _hidden(second) == [False, False]
        assert _hidden(ready) == [False]
        out, _ = call("pgflow_run_now", "--flow", FLOW, "--yes")
        assert out == f"no run(s) with waiting work of flow '{FLOW}': nothing to run now\n"


# -- the admin -----------------------------------------------------------------------------------------


def test_run_now_in_the_admin_needs_its_permission() -> None:
    compile_flow(commands_flows.greet)
    run_id = _delayed("cmd_greet")
    viewer = operator("retry_run")
    assert 'value="run_runs_now"' not in viewer.get("/admin/pgflow/run/").content.decode()
    act(viewer, "/admin/pgflow/run/", "run_runs_now", run_id)
    assert _hidden(run_id) == [True], "refused without the permission"

    client = operator("run_now")
    assert 'value="run_runs_now"' in client.get("/admin/pgflow/run/").content.decode()
    html = act(client, "/admin/pgflow/run/", "run_runs_now", run_id)
    assert said(html) == [f"Ran run {run_id} now: 1 waiting task can start at once."]
    assert _hidden(run_id) == [False]
    (entry,) = LogEntry.objects.filter(object_id=str(run_id))
    assert entry.get_change_message() == f"Ran run {run_id} now: 1 waiting task can start at once."
    html = act(client, "/admin/pgflow/run/", "run_runs_now", run_id)
    assert said(html) == [f"Run {run_id} was not run now: nothing of it was waiting."]
    support.q("select pgflow.cancel_run(%s)", [run_id])
    html = act(client, "/admin/pgflow/run/", "run_runs_now", run_id)
    assert said(html) == [
        f"Run {run_id} is failed: nothing of it waits to run; retry it to run its failed tasks again"
    ]
    assert said(html, visible=True)[0].startswith(f"Run {str(run_id)[-8:]} is failed: "), "named once, short"
