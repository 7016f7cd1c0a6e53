"""``pgflow_requeue_stalled``, ``pgflow_prune`` and ``pgflow_delete_flow``, and the operations they call.

Time is simulated by back-dating timestamps, as in the SQL tests.
"""

from __future__ import annotations

import io
import json
from datetime import timedelta

import pytest
from django.core.management.base import CommandError

from pgflow_django import start_flow
from pgflow_django.flows.compiler import compile_flow
from pgflow_django.runs import operations
from tests.integration import commands_flows
from tests.integration.commands_support import (
    call,
    drop_command_flows,
    flow_exists,
    manage_in_process,
    queue_exists,
    run_status,
    stderr_lines,
)
from tests.sql import support
from tests.support.db import scalar


@pytest.fixture
def greet() -> None:
    compile_flow(commands_flows.greet)


class FakeTerminal(io.StringIO):
    """Standard input that claims to be a terminal, with the operator's answer in it."""

    def isatty(self) -> bool:
        return True


@pytest.mark.usefixtures("greet")
class TestRequeueStalled:
    def test_requeues_a_task_older_than_timeout_plus_30s(self) -> None:
        run_id = start_flow("cmd_greet", {"name": "ada"})
        support.claim_one("cmd_greet")
        support.backdate_started(run_id, "hello", 5 + 31)

        out, _ = call("pgflow_requeue_stalled", "--format", "json")
        assert json.loads(out) == {"requeued": 1, "permanently_stalled": 0}
        assert support.task(run_id, "hello")["status"] == "queued"

    def test_a_task_without_attempts_left_is_permanently_stalled(self) -> None:
        run_id = start_flow("cmd_greet", {"name": "ada"})
        support.claim_one("cmd_greet")
        support.q("update pgflow.step_tasks set attempts_count = 2 where run_id = %s", [run_id])
        support.backdate_started(run_id, "hello", 5 + 31)

        out, _ = call("pgflow_requeue_stalled")
        assert out.strip() == "requeued 0 stalled task(s); 1 permanently stalled (exhausted)"
        assert run_status(run_id) == "failed"

    def test_a_fresh_claim_is_left_alone(self) -> None:
        start_flow("cmd_greet", {"name": "ada"})
        support.claim_one("cmd_greet")
        out, _ = call("pgflow_requeue_stalled")
        assert out.strip() == "requeued 0 stalled task(s); 0 permanently stalled (exhausted)"

    def test_operation_returns_counts(self) -> None:
        assert operations.requeue_stalled() == operations.RequeueResult(requeued=0, permanently_stalled=0)


@pytest.mark.usefixtures("greet")
class TestPrune:
    def finished_run(self, days_ago: int) -> object:
        run_id = start_flow("cmd_greet", {"name": "old"}, run_id=support.old_run_id(days_ago + 1))
        support.run_step("cmd_greet", "hello", {"greeting": "hello old"})
        support.run_step("cmd_greet", "shout", "HELLO OLD")
        support.q(
            "update pgflow.runs set completed_at = now() - make_interval(days => %s) where run_id = %s",
            [days_ago, run_id],
        )
        return run_id

    def test_deletes_runs_finished_before_the_retention(self) -> None:
        old = self.finished_run(days_ago=8)
        recent = self.finished_run(days_ago=1)
        going = start_flow("cmd_greet", {"name": "going"})

        out, _ = call("pgflow_prune", "--older-than", "7d", "--format", "json")
        counts = json.loads(out)
        assert counts["runs"] >= 1 and counts["step_tasks"] >= 2
        assert run_status(old) is None
        assert run_status(recent) == "completed"
        assert run_status(going) == "started"

    def test_text_output_and_compound_duration(self) -> None:
        self.finished_run(days_ago=2)
        out, _ = call("pgflow_prune", "--older-than", "1d12h")
        assert out.startswith("pruned ") and "run(s)" in out and "archived message(s)" in out

    def test_operation_refuses_a_negative_retention(self) -> None:
        with pytest.raises(ValueError, match="must not be negative"):
            operations.prune(timedelta(seconds=-1))

    def test_invalid_duration(self) -> None:
        with pytest.raises(CommandError, match="invalid duration '7x'"):
            call("pgflow_prune", "--older-than", "7x")

    def test_duration_is_required(self) -> None:
        with pytest.raises(CommandError, match="--older-than"):
            call("pgflow_prune")


@pytest.mark.usefixtures("greet")
class TestDeleteFlow:
    def test_yes_deletes_the_flow_its_runs_and_queue(self) -> None:
        run_id = start_flow("cmd_greet", {"name": "ada"})
        out, _ = call("pgflow_delete_flow", "cmd_greet", "--yes")
        assert out.strip() == "deleted flow 'cmd_greet': 1 run(s) and its queue"
        assert not flow_exists("cmd_greet") and not queue_exists("cmd_greet")
        assert run_status(run_id) is None

    def test_refuses_without_a_terminal(self) -> None:
        with pytest.raises(CommandError, match="standard input is not a terminal; pass --yes"):
            call("pgflow_delete_flow", "cmd_greet", stdin=io.StringIO("cmd_greet\n"))
        assert flow_exists("cmd_greet")

    def test_asks_on_a_terminal(self) -> None:
        start_flow("cmd_greet", {"name": "ada"})
        out, _ = call("pgflow_delete_flow", "cmd_greet", stdin=FakeTerminal("cmd_greet\n"))
        assert "This deletes flow 'cmd_greet' with its 1 run(s), 1 still in progress" in out
        assert not flow_exists("cmd_greet")

    def test_a_wrong_answer_deletes_nothing(self) -> None:
        with pytest.raises(CommandError, match="not confirmed"):
            call("pgflow_delete_flow", "cmd_greet", stdin=FakeTerminal("y\n"))
        assert flow_exists("cmd_greet")

    def test_warns_about_live_workers(self) -> None:
        support.q(
            "with w as (insert into pgflow.workers (worker_id, queue_name, function_name) "
            "values (gen_random_uuid(), 'cmd_greet', 'cmd_greet') returning worker_id) "
            "insert into pgflow.worker_support select worker_id, 'cmd_greet', 'hello' from w"
        )
        _, err = call("pgflow_delete_flow", "cmd_greet", "--yes")
        assert "1 live worker(s) serve flow 'cmd_greet'" in err

    def test_unknown_flow(self) -> None:
        with pytest.raises(
            CommandError, match=r"no flow 'cmd_ghost' in the database \(compiled flows: .*cmd_greet"
        ):
            call("pgflow_delete_flow", "cmd_ghost", "--yes")

    def test_operation_reports_what_it_deleted(self) -> None:
        start_flow("cmd_greet", {"name": "ada"})
        summary = operations.delete_flow("cmd_greet")
        assert (summary.flow_slug, summary.runs, summary.active_runs) == ("cmd_greet", 1, 1)


def test_exit_codes(transactional_db: None) -> None:
    drop_command_flows()
    try:
        compile_flow(commands_flows.greet)
        refused = manage_in_process("pgflow_delete_flow", "cmd_greet")
        assert refused.returncode == 1
        assert stderr_lines(refused) == [
            "CommandError: refusing to delete flow 'cmd_greet' without confirmation: standard input is not "
            "a terminal; pass --yes to delete it"
        ]
        assert flow_exists("cmd_greet")

        deleted = manage_in_process("pgflow_delete_flow", "cmd_greet", "--yes")
        assert deleted.returncode == 0, deleted.stderr
        assert not flow_exists("cmd_greet")

        requeued = manage_in_process("pgflow_requeue_stalled", "--format", "json")
        assert requeued.returncode == 0, requeued.stderr
        assert set(json.loads(requeued.stdout)) == {"requeued", "permanently_stalled"}

        pruned = manage_in_process("pgflow_prune", "--older-than", "3650d")
        assert pruned.returncode == 0, pruned.stderr
        assert scalar("select count(*) from pgflow.flows where flow_slug = 'cmd_greet'") == 0
    finally:
        drop_command_flows()
