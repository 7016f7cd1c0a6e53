"""The engine's JSON rule where values enter through the API (issue 14 item 7, issue 15 item 1):
``start_flow(s)`` and the tasks backend's ``enqueue`` accept what DjangoJSONEncoder encodes and refuse,
in one line and before anything is written, what the engine's own worker could not decode later."""

from __future__ import annotations

import datetime
import decimal
import uuid
from typing import Any

import pytest
from django.db import connection

from pgflow_django import Flow, get_run, start_flow, start_flows
from pgflow_django.flows.compiler import compile_flow
from pgflow_django.runs.client import InvalidInput
from pgflow_django.runs.encoding import MAX_INT_DIGITS, MAX_JSON_DEPTH

pytestmark = pytest.mark.django_db

rule = Flow("json_rule")


@rule.step()
def only(flow_input: Any) -> Any:
    return flow_input


@pytest.fixture
def flow() -> Flow:
    compile_flow(rule)
    return rule


def nested(containers: int) -> Any:
    value: Any = []
    for _ in range(containers - 1):
        value = [value]
    return value


def run_count() -> int:
    with connection.cursor() as cursor:
        cursor.execute("select count(*) from pgflow.runs where flow_slug = 'json_rule'")
        return int(cursor.fetchone()[0])


def test_datetimes_decimals_and_uuids_are_stored_as_strings(flow: Flow) -> None:
    value = {
        "at": datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.UTC),
        "on": datetime.date(2026, 1, 2),
        "amount": decimal.Decimal("1.50"),
        "id": uuid.UUID(int=1),
    }
    strings = {
        "at": "2026-01-02T03:04:05Z",
        "on": "2026-01-02",
        "amount": "1.50",
        "id": "00000000-0000-0000-0000-000000000001",
    }
    assert get_run(start_flow(flow, value)).input == strings
    assert [get_run(run_id).input for run_id in start_flows(flow, [value, [value["id"]]])] == [
        strings,
        [strings["id"]],
    ]


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (nested(MAX_JSON_DEPTH + 1), f"cannot be stored: nested deeper than {MAX_JSON_DEPTH} levels"),
        (nested(985), f"cannot be stored: nested deeper than {MAX_JSON_DEPTH} levels"),
        ({"n": 10**MAX_INT_DIGITS}, f"cannot be stored: integer exceeds {MAX_INT_DIGITS} digits"),
        ({"text": "lone \udc80"}, "contains a lone surrogate"),
    ],
)
def test_what_the_worker_could_not_decode_is_refused_before_any_write(
    flow: Flow, value: Any, reason: str
) -> None:
    before = run_count()
    with pytest.raises(InvalidInput, match=rf"^input of flow 'json_rule' {reason}") as info:
        start_flow(flow, value)
    assert "\n" not in str(info.value)
    with pytest.raises(InvalidInput, match=rf"^input #1 of flow 'json_rule' {reason}"):
        start_flows(flow, [{"fine": True}, value])
    assert run_count() == before


def test_the_depth_limit_itself_is_accepted(flow: Flow) -> None:
    assert get_run(start_flow(flow, nested(MAX_JSON_DEPTH))).input == nested(MAX_JSON_DEPTH)


def test_task_arguments_past_the_bounds_are_refused_at_enqueue() -> None:
    from testproject.example.tasks import add

    with pytest.raises(InvalidInput, match="nested deeper than"):
        add.enqueue(nested(MAX_JSON_DEPTH), 1)
    with pytest.raises(InvalidInput, match="nested deeper than Python's recursion limit"):
        add.enqueue(nested(5000), 1)
