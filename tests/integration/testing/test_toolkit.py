"""run_flow, drain, time control and overrides inside Django's TestCase: the real claim, handlers and
completions on the test's own connection and transaction."""

from __future__ import annotations

import uuid
from typing import Any

import psycopg
import pytest
from django.db import connection
from django.test import TestCase

from pgflow_django import Flow, Retry, compile_flow, route_flow, start_flow, with_step_queues
from pgflow_django.db.connect import connection_params
from pgflow_django.testing import (
    IN_PROCESS_WORKER_ID,
    DrainStuck,
    advance,
    drain,
    fail_next,
    override_handler,
    run_flow,
)
from testproject.example import flows as example
from testproject.example.models import LedgerEntry

hops = Flow("testing_hops", max_attempts=3, base_delay=60, timeout=10)


@hops.step()
def begin(flow_input: Any, ctx: Any) -> Any:
    return {"n": flow_input["n"], "attempt": ctx.attempt}


@hops.step(depends_on=[begin], start_delay=120)
def later(deps: Any) -> Any:
    return deps["begin"]["n"] + 1


@hops.step(depends_on=[later], atomic=True)
def record(deps: Any, ctx: Any) -> Any:
    LedgerEntry.objects.create(flow=ctx.flow_slug, key=str(ctx.run_id), attempt=ctx.attempt)
    return deps["later"]


def q1(sql: str, params: Any = None) -> Any:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        row = cursor.fetchone()
    return None if row is None else row[0]


class RunFlowTests(TestCase):
    def test_the_run_stays_in_the_test_transaction(self) -> None:
        run = run_flow(example.chain, {"n": 1})
        assert run.status == "completed"
        assert run.output == {"third": {"n": 1, "flow_n": 1}}
        # another connection never sees it: nothing was committed
        with psycopg.connect(**connection_params()) as other:
            assert other.execute(
                "select count(*) from pgflow.runs where run_id = %s", [run.run_id]
            ).fetchone() == (0,)

    def test_ctx_is_what_a_worker_gives(self) -> None:
        seen: list[Any] = []

        def spy(item: Any, ctx: Any) -> Any:
            seen.append(ctx)
            return item * item

        with override_handler(example.fanout, "square", spy):
            run = run_flow(example.fanout, {"count": 2})
        assert run.output == {"total": 1}
        assert [(c.flow_slug, c.step_slug, c.task_index, c.attempt, c.queue_name) for c in seen] == [
            ("example_map", "square", 0, 1, "example_map"),
            ("example_map", "square", 1, 1, "example_map"),
        ]
        message_ids = {
            q1(
                "select message_id from pgflow.step_tasks where run_id = %s and step_slug = 'square'"
                " and task_index = %s",
                [run.run_id, c.task_index],
            )
            for c in seen
        }
        assert message_ids == {c.message_id for c in seen}
        assert seen[0].run_id == run.run_id

    def test_delays_are_skipped_and_the_attempts_are_real(self) -> None:
        with fail_next(hops, "begin", times=2):
            compile_flow(hops)
            run_id = start_flow(hops, {"n": 1})
            summary = drain(flows=[hops])
        run = drain_result(run_id)
        assert run.status == "completed"
        assert run.task("begin").attempts == 3
        assert run.outputs["begin"] == {"n": 1, "attempt": 3}
        # back-off 60 * 2 + 60 * 4, then the 120 s start delay of `later`
        assert summary.skipped_seconds == pytest.approx(480, abs=3)
        assert summary.failed_attempts == 2 and summary.tasks == 5

    def test_an_atomic_handler_rolls_back_its_failed_attempt_only(self) -> None:
        def flaky_record(deps: Any, ctx: Any) -> Any:
            LedgerEntry.objects.create(flow="testing_hops", key=str(ctx.run_id), attempt=ctx.attempt)
            if ctx.attempt == 1:
                raise RuntimeError("after the write")
            return deps["later"]

        with override_handler(hops, record, flaky_record):
            run = run_flow(hops, {"n": 1})
        assert run.status == "completed"
        assert list(LedgerEntry.objects.filter(key=str(run.run_id)).values_list("attempt", flat=True)) == [2]

    def test_async_override_and_retry_delay(self) -> None:
        async def slow_then_fine(deps: Any, ctx: Any) -> Any:
            if ctx.attempt == 1:
                raise Retry(delay=3600)
            return {"n": 0, "flow_n": (await ctx.aflow_input())["n"]}

        with override_handler(example.chain, "second", slow_then_fine):
            run = run_flow(example.chain, {"n": 9})
        assert run.status == "completed"
        assert run.task("second").attempts == 2
        assert run.task("second").errors == ("retry requested in 3600s",)
        assert run.outputs["third"] == {"n": -3, "flow_n": 9}

    def test_failure_paths_and_task_index(self) -> None:
        with fail_next(example.fanout, "square", times=3, error=ValueError, task_index=1) as armed:
            run = run_flow(example.fanout, {"count": 3})
        assert armed.raised == 3
        assert run.status == "failed"
        assert run.task("square", 1).errors == ("ValueError: fail_next: injected failure of square",) * 3
        assert run.task("square", 0).attempts == 1

    def test_step_queued_and_routed_flows(self) -> None:
        steps = with_step_queues(example.fanout.copy(slug="testing_fanout_steps"))
        routed = route_flow(
            example.fanout.copy(slug="testing_fanout_routed"),
            queues={"numbers": "testing_q1", "square": "testing_q2", "total": "testing_q1"},
        )
        assert run_flow(steps, {"count": 4}).output == {"total": 14}
        assert run_flow(routed, {"count": 4}).output == {"total": 14}


def drain_result(run_id: uuid.UUID) -> Any:
    from pgflow_django.testing import load_run

    return load_run(run_id)


class DrainTests(TestCase):
    @classmethod
    def setUpTestData(cls) -> None:
        compile_flow(example.chain)

    def test_advance_moves_time_by_exactly_what_is_asked(self) -> None:
        compile_flow(hops)
        run_id = start_flow(hops, {"n": 1})
        summary = drain(flows=[hops], skip_delays=False)
        assert summary.tasks == 1
        assert [round(item.seconds) for item in summary.waiting] == [120]
        advance(100)
        assert drain(flows=[hops], skip_delays=False).tasks == 0
        advance(21)
        assert drain(flows=[hops], skip_delays=False).tasks == 2
        assert drain_result(run_id).status == "completed"

    def test_a_task_held_by_another_worker_is_reported(self) -> None:
        run_id = start_flow(example.chain, {"n": 1})
        other = uuid.uuid4()
        q1(
            "select count(*) from pgflow.start_tasks('example_chain', 'example_chain',"
            " (select array_agg(msg_id) from pgmq.read('example_chain', 30, 10)), %s)",
            [other],
        )
        with pytest.raises(DrainStuck, match=f"run {run_id}.*first\\[0\\] is held by worker {other}"):
            drain(flows=[example.chain])

    def test_a_run_of_an_unknown_flow_is_reported(self) -> None:
        stranger = example.chain.copy(slug="testing_unregistered")
        compile_flow(stranger)
        start_flow(stranger, {"n": 1})
        with pytest.raises(DrainStuck, match="no Python Flow is known"):
            drain()
        assert drain(flows=[stranger]).tasks == 3

    def test_max_tasks(self) -> None:
        start_flow(example.chain, {"n": 1})
        with pytest.raises(DrainStuck, match="max_tasks=2"):
            drain(max_tasks=2)
        # the third task was given back: queued, its attempt returned, and it runs next
        rest = drain(max_tasks=1)
        assert rest.tasks == 1 and len(rest.completed) == 1

    def test_the_summary(self) -> None:
        ids = [start_flow(example.chain, {"n": n}) for n in range(3)]
        summary = drain()
        assert summary.tasks == 9 and summary.failed_attempts == 0
        assert sorted(summary.completed) == sorted(ids)
        assert q1("select count(distinct last_worker_id) from pgflow.step_tasks") == 1
        assert q1("select last_worker_id from pgflow.step_tasks limit 1") == IN_PROCESS_WORKER_ID


class OutputRuleTests(TestCase):
    def test_a_nul_in_an_output_is_stored_escaped_and_the_run_goes_on(self) -> None:
        with override_handler(example.chain, "first", lambda flow_input: {"n": 1, "text": "a\x00b"}):
            run = run_flow(example.chain, {"n": 1})
        assert run.status == "completed"
        assert run.task("first").attempts == 1
        assert run.task("first").output == {"n": 1, "text": "a\\u0000b"}

    def test_an_output_past_the_bound_fails_at_once_and_the_test_goes_on(self) -> None:
        deep: Any = []
        for _ in range(600):
            deep = [deep]
        with override_handler(example.chain, "first", lambda flow_input: deep):
            run = run_flow(example.chain, {"n": 1})
        assert run.status == "failed"
        assert run.task("first").attempts == 1, "a value the engine refuses is not retried"
        assert "output not encodable" in (run.task("first").error_message or "")
        assert q1("select 1") == 1


class TaskRunAfterTests(TestCase):
    def test_run_after_is_held_or_brought_forward(self) -> None:
        import datetime as dt

        from django.utils import timezone

        from testproject.example.tasks import add

        result = add.using(run_after=timezone.now() + dt.timedelta(hours=1)).enqueue(1, 2)
        held = drain(skip_delays=False)
        assert held.tasks == 0 and len(held.waiting) == 1
        assert drain().skipped_seconds == pytest.approx(3600, abs=5)
        result.refresh()
        assert result.return_value == 3


class PlannerSettingTests(TestCase):
    """A drain leaves the connection's planner settings alone (the engine's hot functions carry their
    own, migration 0018): handlers and the test see the test's setting, also when the drain raises."""

    def test_the_callers_plan_cache_mode_is_kept(self) -> None:
        q1("select set_config('plan_cache_mode', 'force_custom_plan', true)")
        seen: list[str] = []

        def first(flow_input: Any) -> Any:
            seen.append(q1("show plan_cache_mode"))
            return {"n": flow_input["n"]}

        with override_handler(example.chain, "first", first):
            assert run_flow(example.chain, {"n": 1}).status == "completed"
        assert seen == ["force_custom_plan"]
        assert q1("show plan_cache_mode") == "force_custom_plan"
        start_flow(example.chain, {"n": 2})
        assert drain().tasks == 3
        assert q1("show plan_cache_mode") == "force_custom_plan"
        with fail_next(example.chain, "first", times=10), pytest.raises(DrainStuck):
            start_flow(example.chain, {"n": 3})
            drain(max_tasks=1)
        assert q1("show plan_cache_mode") == "force_custom_plan"


@pytest.mark.django_db(transaction=True)
def test_plan_cache_mode_in_autocommit_is_put_back(clean_example_flows: None) -> None:
    compile_flow(example.chain)
    assert run_flow(example.chain, {"n": 1}).status == "completed"
    assert q1("show plan_cache_mode") == "auto"


class ClaimSentAheadTests(TestCase):
    """The drain sends its next claim with the statement recording a batch (one round trip); asking
    for another claim than the one sent ahead is a defect, never a silent second claim."""

    def args(self, qty: int) -> tuple[Any, ...]:
        return ("example_chain", "example_chain", "q_example_chain", IN_PROCESS_WORKER_ID, 12, qty)

    def setUp(self) -> None:
        from pgflow_django.testing.inprocess import InProcessEngine

        compile_flow(example.chain)
        self.runs = {start_flow(example.chain, {"n": n}) for n in range(2)}
        self.engine = InProcessEngine("default")

    def test_the_claim_asked_for_is_answered_by_the_one_sent_ahead(self) -> None:
        self.engine.claim_next(*self.args(1))
        assert self.engine.queue_table("example_chain") == "q_example_chain"  # the claim travels here
        assert q1("select count(*) from pgflow.step_tasks where status = 'started'") == 1
        claim = self.engine.claim(*self.args(1))
        assert [task.attempt for task in claim.tasks] == [1]
        assert q1("select count(*) from pgflow.step_tasks where status = 'started'") == 1

    def test_another_claim_than_the_one_sent_ahead_is_refused(self) -> None:
        self.engine.claim_next(*self.args(1))
        self.engine.queue_table("example_chain")
        with pytest.raises(AssertionError, match="the claim sent ahead is not the one asked for"):
            self.engine.claim(*self.args(2))

    def test_a_claim_composed_but_never_sent_is_dropped(self) -> None:
        self.engine.claim_next(*self.args(1))
        assert q1("select count(*) from pgflow.step_tasks where status = 'started'") == 0
        assert len(self.engine.claim(*self.args(2)).tasks) == 2

    def test_a_statement_that_fails_undoes_the_claim_sent_with_it(self) -> None:
        from pgflow_django.worker.connection import ClaimedTask

        task = ClaimedTask("example_chain", uuid.uuid4(), "first", 0, 1, 1, None)
        self.engine.claim_next(*self.args(1))
        with pytest.raises(psycopg.Error):
            self.engine.complete_task(task, "not json")
        assert q1("select count(*) from pgflow.step_tasks where status = 'started'") == 0
        claim = self.engine.claim(*self.args(2))
        assert [task.attempt for task in claim.tasks] == [1, 1], "the undone claim counted no attempt"
