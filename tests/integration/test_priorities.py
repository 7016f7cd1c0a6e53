"""Priorities from Python (docs/flow-control.md, Priorities): the documented example, the precedence
of a start's priority over the step's and the flow's defaults, recompiling a changed default, and
the one-line errors for a bad priority."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import transaction

from pgflow_django import Flow, start_flow, start_flows
from pgflow_django.flows.compiler import compile_flow
from pgflow_django.flows.dsl import FlowDefinitionError
from tests.sql.support import q, q1

pytestmark = pytest.mark.django_db

DOC = Path(__file__).resolve().parents[2] / "docs" / "flow-control.md"


def blocks() -> list[str]:
    section = DOC.read_text(encoding="utf-8").split("## Priorities", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", section, re.S)


def headers(run_id: Any) -> dict[str, Any]:
    return {
        row["step"]: row["headers"]
        for row in q(
            "select message->>'step_slug' as step, headers from pgmq.q_doc_reports"
            " where message->>'run_id' = %s",
            [str(run_id)],
        )
    }


@pytest.fixture
def cleanup() -> Iterator[None]:
    yield
    q("select pgflow.delete_flow_and_data(flow_slug) from pgflow.flows where flow_slug like 'doc_%%'")


def test_the_documented_example(cleanup: None) -> None:
    definition, starts = blocks()
    namespace: dict[str, Any] = {}
    exec(compile(definition, "docs/flow-control.md", "exec"), namespace)
    compile_flow(namespace["reports"])
    exec(compile(starts, "docs/flow-control.md", "exec"), namespace)
    assert headers(namespace["usual"]) == {"gather": {"priority": -10}}
    assert headers(namespace["urgent"]) == {"gather": {"priority": 90}}
    assert [headers(run_id) for run_id in namespace["backfill"]] == [{"gather": {"priority": -100}}] * 2
    run = namespace["usual"]
    msg = q1("select msg_id from pgmq.q_doc_reports where message->>'run_id' = %s", [str(run)])["msg_id"]
    task = q1(
        "select attempt from pgflow.start_tasks('doc_reports', 'doc_reports', array[%s]::bigint[],"
        " gen_random_uuid(), null)",
        [msg],
    )
    q1(
        "select pgflow.complete_task(%s::uuid, 'gather', 0, %s, '{\"rows\": 3}'::jsonb)",
        [run, task["attempt"]],
    )
    assert headers(run) == {"mail": {"priority": 5}}, "the step's default, once the step starts"


def test_a_changed_default_is_a_new_version_or_under_refuse_updated_in_place(cleanup: None) -> None:
    first = Flow("doc_defaults", priority=3)
    first.step(slug="only")(lambda flow_input: flow_input)
    compile_flow(first)
    changed = Flow("doc_defaults", priority=-4)
    changed.step(slug="only", priority=8)(lambda flow_input: flow_input)
    with transaction.atomic():
        assert compile_flow(changed).flow_slug == "doc_defaults___v2"
        transaction.set_rollback(True)
    result = compile_flow(changed, on_change="refuse")
    assert result.status == "verified"
    assert "flow priority: 3 -> -4" in result.options_updated
    assert "step only priority: default -> 8" in result.options_updated
    assert q1("select opt_priority from pgflow.flows where flow_slug = 'doc_defaults'") == {
        "opt_priority": -4
    }
    assert q1("select opt_priority from pgflow.steps where flow_slug = 'doc_defaults'") == {"opt_priority": 8}


@pytest.mark.parametrize("value", [101, -101, True, 1.5, "high"])
def test_a_bad_priority_is_one_line_naming_the_range(value: Any) -> None:
    expected = f"must be a whole number from -100 to 100 (higher is claimed first), got {value!r}"
    with pytest.raises(ValueError) as started:
        start_flow("doc_never_compiled", {}, priority=value)
    assert str(started.value) == f"start_flow: priority {expected}"
    with pytest.raises(ValueError) as batch:
        start_flows("doc_never_compiled", [{}], priority=value)
    assert str(batch.value) == f"start_flows: priority {expected}"
    with pytest.raises(FlowDefinitionError) as flow:
        Flow("doc_bad", priority=value)
    assert str(flow.value) == f"flow 'doc_bad': priority {expected}"
    with pytest.raises(FlowDefinitionError) as step:
        Flow("doc_bad_step").step(slug="s", priority=value)(lambda flow_input: flow_input)
    assert (
        str(step.value)
        == f"step 's' of flow 'doc_bad_step': priority {expected} (or None for the flow default)"
    )
