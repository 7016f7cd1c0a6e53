"""Cancelling a run from Python (``pgflow_django.cancel_run``) and the command line
(``manage.py pgflow_cancel``), issue 14 item 8: one line per outcome (cancelled, already finished, not
found), the documented exit codes, and the same SQL call as the admin's Cancel action."""

from __future__ import annotations

import uuid

import pytest
from django.core.management.base import CommandError
from django.db import transaction

import pgflow_django
from pgflow_django import CancelResult, RunNotFound, cancel_run, start_flow
from pgflow_django.flows.compiler import compile_flow
from tests.integration import commands_flows
from tests.integration.commands_support import call, drop_command_flows, manage_in_process, stderr_lines
from tests.sql import support

FLOW = "cmd_greet"


@pytest.fixture
def greet() -> None:
    compile_flow(commands_flows.greet)


def _run(run_id: uuid.UUID) -> tuple[str, str | None]:
    row = support.run(run_id)
    return row["status"], row["error_message"]


def _finished_run() -> uuid.UUID:
    run_id = start_flow(FLOW, {"name": "ada"})
    support.q("select pgflow.cancel_run(%s)", [run_id])
    return run_id


@pytest.mark.usefixtures("greet")
class TestCancelRun:
    def test_is_exported(self) -> None:
        assert pgflow_django.cancel_run is cancel_run
        assert {"cancel_run", "CancelResult"} <= set(pgflow_django.__all__)

    def test_cancels_a_started_run_its_tasks_and_messages(self) -> None:
        run_id = start_flow(FLOW, {"name": "ada"})
        support.claim_one(FLOW)
        assert cancel_run(run_id) == CancelResult(run_id=run_id, cancelled=True, status="failed")
        assert _run(run_id) == ("failed", "cancelled")
        assert [t["status"] for t in support.tasks(run_id)] == ["cancelled"]
        assert support.live_ids(FLOW) == set()

    def test_the_reason_is_recorded_with_the_error(self) -> None:
        run_id = start_flow(FLOW, {"name": "ada"})
        cancel_run(str(run_id), reason="duplicate order")
        assert _run(run_id) == ("failed", "cancelled: duplicate order")

    def test_a_blank_reason_is_none(self) -> None:
        run_id = start_flow(FLOW, {"name": "ada"})
        cancel_run(run_id, reason="  ")
        assert _run(run_id) == ("failed", "cancelled")

    def test_a_finished_run_is_left_as_it_is(self) -> None:
        run_id = _finished_run()
        assert cancel_run(run_id, reason="again") == CancelResult(
            run_id=run_id, cancelled=False, status="failed"
        )
        assert _run(run_id) == ("failed", "cancelled")

    def test_an_unknown_run_raises_run_not_found_and_the_callers_transaction_survives(self) -> None:
        missing = uuid.uuid4()
        with transaction.atomic():
            run_id = start_flow(FLOW, {"name": "ada"})
            with pytest.raises(RunNotFound, match=f"no run {missing}: check the id"):
                cancel_run(missing)
            assert cancel_run(run_id).cancelled
        assert _run(run_id) == ("failed", "cancelled")

    @pytest.mark.parametrize(
        ("reason", "problem"), [("a\x00b", "NUL character"), ("\ud800", "lone surrogate")]
    )
    def test_a_reason_postgresql_cannot_store_is_refused_before_any_sql(
        self, reason: str, problem: str
    ) -> None:
        run_id = start_flow(FLOW, {"name": "ada"})
        with pytest.raises(ValueError, match=problem):
            cancel_run(run_id, reason=reason)
        assert _run(run_id) == ("started", None)

    def test_a_bad_run_id_is_one_clear_error(self) -> None:
        with pytest.raises(ValueError, match="run id 'nope' is not a UUID"):
            cancel_run("nope")


@pytest.mark.usefixtures("greet")
class TestCommand:
    def test_cancelled_is_one_line(self) -> None:
        run_id = start_flow(FLOW, {"name": "ada"})
        out, err = call("pgflow_cancel", str(run_id), "--reason", "operator stop")
        assert (out, err) == (f"cancelled run {run_id}\n", "")
        assert _run(run_id) == ("failed", "cancelled: operator stop")

    def test_already_finished_exits_3_and_changes_nothing(self) -> None:
        run_id = _finished_run()
        with pytest.raises(CommandError) as info:
            call("pgflow_cancel", str(run_id))
        assert str(info.value) == f"run {run_id} had already finished (failed); nothing changed"
        assert info.value.returncode == 3

    def test_not_found_exits_1(self) -> None:
        missing = uuid.uuid4()
        with pytest.raises(CommandError, match=f"^no run {missing}: check the id") as info:
            call("pgflow_cancel", str(missing))
        assert info.value.returncode == 1

    def test_a_reason_with_nul_is_a_usage_error(self) -> None:
        run_id = start_flow(FLOW, {"name": "ada"})
        with pytest.raises(CommandError, match="--reason: reason contains a NUL") as info:
            call("pgflow_cancel", str(run_id), "--reason", "a\x00b")
        assert info.value.returncode == 2
        assert _run(run_id) == ("started", None)


def test_lines_and_exit_codes(transactional_db: None) -> None:
    drop_command_flows()
    try:
        compile_flow(commands_flows.greet)
        run_id = start_flow(FLOW, {"name": "ada"})

        cancelled = manage_in_process("pgflow_cancel", str(run_id), "--reason", "dup")
        assert (cancelled.returncode, cancelled.stdout, cancelled.stderr) == (
            0,
            f"cancelled run {run_id}\n",
            "",
        )
        again = manage_in_process("pgflow_cancel", str(run_id))
        assert again.returncode == 3
        assert stderr_lines(again) == [
            f"CommandError: run {run_id} had already finished (failed); nothing changed"
        ]
        missing = uuid.uuid4()
        unknown = manage_in_process("pgflow_cancel", str(missing))
        assert unknown.returncode == 1
        assert len(stderr_lines(unknown)) == 1 and f"no run {missing}" in unknown.stderr
        bad = manage_in_process("pgflow_cancel", "not-a-uuid")
        assert bad.returncode == 2
        assert len(stderr_lines(bad)) == 1 and "'not-a-uuid' is not a UUID" in bad.stderr
        assert _run(run_id) == ("failed", "cancelled: dup")
    finally:
        drop_command_flows()
