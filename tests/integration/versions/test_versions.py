"""Versions of a flow on the real engine: a changed definition compiled under its slug is a new version
beside the old one (its own rows and queues); runs stay on the version they started on, through
retries and recovery; a start names the version its code defines, or the newest by name."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.db import connection
from django.test import TestCase

from pgflow_django import Concurrency, Flow, compile_flow, get_run, route_flow, start_flow, with_step_queues
from pgflow_django.flows.compiler import FlowMismatch
from pgflow_django.flows.slugs import TASK_FLOW_SLUG_REGEX
from pgflow_django.runs.client import retry_run
from pgflow_django.runs.operations import FlowNotFound
from pgflow_django.runs.versions import VersionInUse, delete_version, flow_versions
from pgflow_django.testing import drain
from tests.support.db import rows, value


def release(number: int, slug: str = "vers", **options: Any) -> Flow:
    flow = Flow(slug, **options)

    @flow.step
    def first(run_input: Any) -> dict[str, int]:
        return {"release": number}

    @flow.step(depends_on=[first])
    def second(deps: Any) -> dict[str, int]:
        if number == 0:
            raise RuntimeError("release 0 fails")
        return {"release": number}

    if number >= 2:

        @flow.step(depends_on=[second])
        def audit(deps: Any) -> dict[str, bool]:
            return {"audited": True}

    return flow


def stored(run_id: Any) -> str:
    return str(value("select flow_slug from pgflow.runs where run_id = %s", [run_id]))


class VersionTests(TestCase):
    def test_a_changed_definition_is_a_new_version_with_its_own_queue(self) -> None:
        v1, v2 = release(1), release(2)
        assert compile_flow(v1).status == "compiled"
        old_run = start_flow(v1, {})
        result = compile_flow(v2)
        assert (result.status, result.flow_slug, result.version_number) == ("versioned", "vers___v2", 2)
        assert compile_flow(v2).status == "verified"
        assert compile_flow(v1).status == "verified", "the old code still finds its version"
        new_run = start_flow(v2, {})
        assert (stored(old_run), stored(new_run)) == ("vers", "vers___v2")
        queues = {row["queue_name"] for row in rows("select queue_name from pgmq.meta")}
        assert {"vers", "vers___v2"} <= queues
        assert rows("select distinct queue_name from pgflow.step_tasks where run_id = %s", [new_run]) == [
            {"queue_name": "vers___v2"}
        ]

        drain(flows=[v1, v2])
        assert sorted(get_run(old_run).outputs) == ["first", "second"]
        assert sorted(get_run(new_run).outputs) == ["audit", "first", "second"]
        assert get_run(old_run).outputs["second"] == {"release": 1}

    def test_a_start_by_name_takes_this_projects_version_else_the_newest(self) -> None:
        v1, v2 = release(1), release(2)
        compile_flow(v1)
        compile_flow(v2)
        assert stored(start_flow(v1, {})) == "vers"
        assert stored(start_flow("vers", {})) == "vers___v2", "no code for it here: the newest version"
        with connection.cursor() as cursor:
            cursor.execute(
                "select pgflow.flow_version('vers'), pgflow.flow_version('vers___v2'),"
                " pgflow.flow_version('vers', %s)",
                [v1.version_key],
            )
            assert cursor.fetchone() == ("vers___v2", "vers___v2", "vers")

    def test_code_whose_version_is_not_compiled_is_told_to_compile_it(self) -> None:
        compile_flow(release(1))
        compile_flow(release(2))
        with pytest.raises(
            FlowNotFound, match=r"the version this code defines .* is not compiled .* pgflow_compile vers"
        ):
            start_flow(release(3, timeout=99), {})

    def test_options_are_part_of_the_version(self) -> None:
        assert compile_flow(release(1)).status == "compiled"
        result = compile_flow(release(1, timeout=90))
        assert (result.status, result.flow_slug) == ("versioned", "vers___v2")
        assert value("select opt_timeout from pgflow.flows where flow_slug = 'vers'") == 60

    def test_a_named_version_is_one_definition(self) -> None:
        named = Flow("vers", version="2026-12")
        named.step(slug="only")(lambda run_input: run_input)
        assert compile_flow(named).status == "compiled"
        changed = Flow("vers", version="2026-12")
        changed.step(slug="other")(lambda run_input: run_input)
        with pytest.raises(FlowMismatch, match="new name"):
            compile_flow(changed)
        renamed = Flow("vers", version="2027-01")
        renamed.step(slug="only")(lambda run_input: run_input)
        result = compile_flow(renamed)
        assert (result.status, result.flow_slug) == ("versioned", "vers___v2"), "a new name, the same shape"
        assert [v.name for v in flow_versions("vers")] == ["v1 (2026-12)", "v2 (2027-01)"]

    def test_refuse_keeps_the_old_behaviour(self) -> None:
        compile_flow(release(1))
        with pytest.raises(FlowMismatch, match="differs from its compiled definition"):
            compile_flow(release(2), on_change="refuse")
        assert [v.flow_slug for v in flow_versions("vers")] == ["vers"]

    def test_a_run_stays_on_its_version_through_retry(self) -> None:
        failing, fixed = release(0, max_attempts=1), release(1, max_attempts=2)
        compile_flow(failing)
        run_id = start_flow(failing, {})
        drain(flows=[failing])
        assert get_run(run_id).status == "failed"
        assert compile_flow(fixed).flow_slug == "vers___v2"
        assert retry_run(run_id) == 1
        assert stored(run_id) == "vers"
        queued = rows(
            "select queue_name, status from pgflow.step_tasks where run_id = %s and step_slug = 'second'",
            [run_id],
        )
        assert queued == [{"queue_name": "vers", "status": "queued"}], (
            "the retried task is on its version's queue"
        )

    def test_a_rerun_starts_the_newest_version(self) -> None:
        v1 = release(1)
        compile_flow(v1)
        run_id = start_flow(v1, {"n": 1})
        drain(flows=[v1])
        compile_flow(release(2))
        again = value("select pgflow.rerun(%s)", [run_id])
        assert (stored(again), get_run(again).input) == ("vers___v2", {"n": 1})

    def test_a_flow_compiled_before_versions_is_claimed_by_its_code(self) -> None:
        v1 = release(1)
        compile_flow(v1)
        with connection.cursor() as cursor:
            cursor.execute("update pgflow.flows set version = null where flow_slug = 'vers'")
        assert stored(start_flow(v1, {})) == "vers", "not claimed yet: the code's start takes it"
        assert compile_flow(v1).status == "verified"
        assert value("select version from pgflow.flows where flow_slug = 'vers'") == v1.version_key
        assert compile_flow(release(2)).flow_slug == "vers___v2"

    def test_step_queued_and_routed_versions(self) -> None:
        assert compile_flow(with_step_queues(release(1, "stepq"))).flow_slug == "stepq"
        v2 = with_step_queues(release(2, "stepq"))
        assert compile_flow(v2).flow_slug == "stepq___v2"
        queues = {
            row["queue_name"]
            for row in rows("select queue_name from pgflow.steps where flow_slug = 'stepq___v2'")
        }
        assert queues == {"stepq___v2__first", "stepq___v2__second", "stepq___v2__audit"}
        run_id = start_flow(v2, {})
        drain(flows=[v2])
        assert get_run(run_id).status == "completed"
        r1 = compile_flow(
            route_flow(release(1, "routedv"), queues=dict.fromkeys(["first", "second"], "vers_jobs"))
        )
        r2 = compile_flow(
            route_flow(release(2, "routedv"), queues=dict.fromkeys(["first", "second", "audit"], "vers_jobs"))
        )
        assert (r1.flow_slug, r2.flow_slug) == ("routedv", "routedv___v2")
        assert (
            value("select count(distinct queue_name) from pgflow.steps where flow_slug like 'routedv%%'") == 1
        )

    def test_deleting_a_version(self) -> None:
        v1, v2 = release(1), release(2)
        compile_flow(v1)
        run_id = start_flow(v1, {})
        compile_flow(v2)
        with pytest.raises(VersionInUse, match="1 unfinished run"):
            delete_version("vers", "1")
        with pytest.raises(VersionInUse, match="newest version"):
            delete_version("vers", "v2")
        drain(flows=[v1])
        assert get_run(run_id).status == "completed"
        assert [v.drained for v in flow_versions("vers")] == [True, False]
        assert delete_version("vers", "1").runs == 1
        assert [v.flow_slug for v in flow_versions("vers")] == ["vers___v2"]
        assert stored(start_flow("vers", {})) == "vers___v2"
        assert compile_flow(v1).flow_slug == "vers___v3", "the old code again: a version of its own"


class VersionLimitTests(TestCase):
    def test_a_routed_flow_versions_past_a_queue_names_length(self) -> None:
        slug = "v" * 47
        first = route_flow(release(1, slug), queues={"first": "vers_jobs", "second": "vers_jobs"})
        changed = route_flow(
            release(1, slug, timeout=9), queues={"first": "vers_jobs", "second": "vers_jobs"}
        )
        compile_flow(first)
        assert compile_flow(changed).flow_slug == f"{slug}___v2", "a routed flow's steps use shared queues"

    def test_a_flow_with_its_own_queue_names_the_slug_it_needs(self) -> None:
        slug = "w" * 45
        compile_flow(release(1, slug))
        with pytest.raises(
            Exception, match=rf"would be version 2 under '{slug}___v2' \(50 characters\).*at most 42"
        ):
            compile_flow(release(1, slug, timeout=9))

    def test_limits_belong_to_each_version(self) -> None:
        v1 = release(1, concurrency=Concurrency(limit=1))
        v2 = release(2, concurrency=Concurrency(limit=2))
        compile_flow(v1)
        compile_flow(v2)
        assert rows(
            "select flow_slug, amount from pgflow.flow_limits where flow_slug like 'vers%%' order by 1"
        ) == [{"flow_slug": "vers", "amount": 1}, {"flow_slug": "vers___v2", "amount": 2}]
        runs = [start_flow(v1, {}) for _ in range(2)] + [start_flow(v2, {}) for _ in range(2)]
        drain(flows=[v1, v2])
        assert {get_run(run_id).status for run_id in runs} == {"completed"}


class TaskFlowVersionTests(TestCase):
    def test_a_later_version_of_a_task_flow_reports_its_task(self) -> None:
        from testproject.example.tasks import add
        from tests.tasks_support import backend

        result = add.enqueue(1, b=2)
        flow = backend().flow_for(add)
        changed = Flow(flow.slug, max_attempts=9)
        changed.step(slug="call")(flow.steps["call"].handler)
        changed_routed = route_flow(changed, queues={"call": flow.queues[0]})
        compiled = compile_flow(changed_routed)
        assert compiled.flow_slug == f"{flow.slug}___v2"
        later = start_flow(
            changed_routed, {"task": "testproject.example.tasks.add", "args": [2], "kwargs": {"b": 3}}
        )
        assert add.get_result(str(later)).args == [2]
        assert add.get_result(result.id).args == [1]
        drain(flows=[changed_routed])
        assert add.get_result(str(later)).return_value == 5


class ReviewedEdgeTests(TestCase):
    """What addresses a flow by its slug keeps working once version 1 is deleted, under every policy,
    and from the testing toolkit."""

    def test_under_refuse_a_changed_option_still_starts(self) -> None:
        from django.test import override_settings

        with override_settings(PGFLOW={"ON_SHAPE_CHANGE": "refuse"}):
            compile_flow(release(1))
            changed = release(1, timeout=90)
            assert compile_flow(changed).status == "verified"
            assert stored(start_flow(changed, {})) == "vers"
            assert stored(start_flow(release(1), {})) == "vers", "the old code starts the one definition too"

    def test_the_flows_slug_keeps_working_after_version_1_is_deleted(self) -> None:
        from pgflow_django.runs import operations
        from pgflow_django.runs.coverage import coverage

        v1, v2 = release(1), release(2)
        compile_flow(v1)
        compile_flow(v2)
        operations.pause("vers", detail="deploy freeze")
        delete_version("vers", "1")
        assert [p.flow_slug for p in operations.pauses()] == ["vers"], "the flow's pause still holds v2"
        assert value("select (pgflow.subscription_pause('vers___v2', 'first')).reason") == "operator"
        assert operations.resume("vers") is not None
        assert operations.pause("vers").flow_slug == "vers", "a flow whose version 1 is gone can be paused"
        assert {row.flow_slug for row in coverage(flow="vers")} == {"vers___v2"}
        parent = Flow("vers_parent")
        parent.subflow("child", flow="vers")
        compile_flow(parent)
        run_id = start_flow(parent, {})
        child = get_run(run_id).child_run_ids
        assert len(child) == 1 and stored(child[0]) == "vers___v2", "a child flow starts its newest version"

    def test_a_fatal_pause_holds_its_version_only(self) -> None:
        compile_flow(release(1))
        compile_flow(release(2))
        value(
            "insert into pgflow.worker_pauses (flow_slug, step_slug, queue_name, reason)"
            " values ('vers', '', 'vers', 'fatal') returning 1"
        )
        assert value("select (pgflow.subscription_pause('vers', 'first')).reason") == "fatal"
        assert value("select (pgflow.subscription_pause('vers___v2', 'first')).reason") is None

    def test_the_testing_toolkit_reaches_a_later_version(self) -> None:
        from pgflow_django.testing import advance, override_handler

        v1, v2 = release(1), release(2, base_delay=60)
        compile_flow(v1)
        compile_flow(v2)
        with override_handler(v2, "audit", lambda deps: {"audited": "by the test"}):
            run_id = start_flow(v2, {})
            drain(flows=[v2])
        assert get_run(run_id).outputs["audit"] == {"audited": "by the test"}
        delayed = start_flow(v2, {}, delay=3600)
        assert drain(flows=[v2], skip_delays=False).tasks == 0
        assert advance(3600, flows=[v2]) == 1, "advance moves a later version's delayed work"
        drain(flows=[v2], skip_delays=False)
        assert get_run(delayed).status == "completed"

    def test_task_flow_versions_are_task_flows(self) -> None:
        from pgflow_django.flows.slugs import is_task_flow_slug_of, task_flow_slug

        slug = task_flow_slug("myapp.tasks.send", "mail")
        assert is_task_flow_slug_of(f"{slug}___v2", "myapp.tasks.send")
        assert re.search(TASK_FLOW_SLUG_REGEX, f"{slug}___v2") and not re.search(
            TASK_FLOW_SLUG_REGEX, "vers___v2"
        )
