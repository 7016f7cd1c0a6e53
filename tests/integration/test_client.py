"""start_flow / start_flows / get_run / wait_for_run on Django's connection, on the real database."""

from __future__ import annotations

import math
import threading
import time
import uuid
from typing import Any

import pytest
from django.db import connection, transaction
from django.test import override_settings

from pgflow_django import (
    Flow,
    InvalidSlug,
    RunNotFound,
    RunView,
    compile_flow,
    get_run,
    start_flow,
    start_flows,
    wait_for_run,
)
from pgflow_django.runs.client import InvalidInput
from tests.integration.commands_flows import REGISTERED
from tests.sql.support import claim, complete, fail, live_ids, run_step, val


def orders_flow(slug: str = "client_orders") -> Flow:
    flow = Flow(slug, max_attempts=1)

    @flow.step()
    def validate(flow_input: Any) -> Any:
        return flow_input

    @flow.map(array=validate)
    def notify(item: Any) -> Any:
        return item

    @flow.step(depends_on=[validate, notify])
    def summarize(deps: Any) -> Any:
        return deps

    return flow


def fan_out_flow(slug: str = "client_fan_out") -> Flow:
    flow = Flow(slug)

    @flow.map()
    def each(item: Any) -> Any:
        return item

    return flow


@pytest.fixture
def orders() -> Flow:
    flow = orders_flow()
    compile_flow(flow)
    return flow


def run_count() -> int:
    return int(val("select count(*) as n from pgflow.runs"))


# -- start_flow ----------------------------------------------------------------------------------------


def test_start_flow_returns_the_run_id_and_queues_the_root_step(orders: Flow) -> None:
    run_id = start_flow(orders, {"items": [1, 2]})
    assert isinstance(run_id, uuid.UUID)
    view = get_run(run_id)
    assert view.status == "started"
    assert view.flow_slug == "client_orders"
    assert view.input == {"items": [1, 2]}
    assert [(s.step_slug, s.step_type, s.step_index, s.status) for s in view.steps] == [
        ("validate", "single", 0, "started"),
        ("notify", "map", 1, "created"),
        ("summarize", "single", 2, "created"),
    ]
    assert len(live_ids("client_orders")) == 1


def test_start_flow_by_slug_with_a_chosen_run_id(orders: Flow) -> None:
    chosen = uuid.uuid4()
    assert start_flow("client_orders", {}, run_id=chosen) == chosen
    assert start_flow("client_orders", {}, run_id=str(uuid.uuid4())) != chosen
    assert get_run(str(chosen)).run_id == chosen


@pytest.mark.parametrize("falsy", [0, "", False, [], {}, None])
def test_falsy_inputs_are_stored_as_themselves(orders: Flow, falsy: Any) -> None:
    assert get_run(start_flow(orders, falsy)).input == falsy


def test_start_flow_joins_the_callers_transaction(orders: Flow) -> None:
    class Abort(Exception):
        pass

    before = run_count()
    with pytest.raises(Abort), transaction.atomic():
        run_id = start_flow(orders, {"id": 1})
        assert get_run(run_id).status == "started"
        raise Abort
    assert run_count() == before
    with pytest.raises(RunNotFound):
        get_run(run_id)


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ({"when": object()}, "not JSON-serialisable"),
        ({"at": {1, 2}}, "not JSON-serialisable"),
        ([math.nan], "not JSON-serialisable"),
        ({"x": math.inf}, "not JSON-serialisable"),
        ({"text": "nul\x00byte"}, "NUL character"),
        ("\x00", "NUL character"),
    ],
)
def test_bad_input_is_refused_before_any_write(orders: Flow, value: Any, reason: str) -> None:
    before = run_count()
    with pytest.raises(InvalidInput, match=rf"^input of flow 'client_orders' .*{reason}"):
        start_flow(orders, value)
    assert run_count() == before


def test_an_escaped_backslash_before_u0000_is_not_a_nul(orders: Flow) -> None:
    text = "\\u0000"
    assert get_run(start_flow(orders, {"text": text})).input == {"text": text}


def test_root_map_needs_an_array_input() -> None:
    flow = fan_out_flow()
    compile_flow(flow)
    with pytest.raises(InvalidInput, match=r"must be a JSON array, because root map step 'each'.*got dict"):
        start_flow(flow, {"not": "an array"})
    refused = r"^Flow client_fan_out has root map steps but input is not an array \(got object\)$"
    with pytest.raises(InvalidInput, match=refused), transaction.atomic():
        start_flow("client_fan_out", {"not": "an array"})
    run_id = start_flow(flow, (1, 2, 3))
    assert get_run(run_id).step("each").initial_tasks == 3


def test_a_flow_defined_where_nothing_registers_it_is_told_how_to_register_and_compile() -> None:
    from pgflow_django import FlowNotFound

    unregistered = Flow("client_defined_in_a_view")

    @unregistered.step()
    def only(flow_input: object) -> None:
        return None

    with pytest.raises(FlowNotFound) as caught, transaction.atomic():
        start_flow(unregistered, {})
    message = str(caught.value)
    assert message.startswith("no flow 'client_defined_in_a_view' (known flows: ")
    assert "a flows.py module of an installed app, or PGFLOW['FLOWS']" in message
    assert "manage.py pgflow_compile" in message


def test_unknown_flow_raises_flow_not_found_in_one_line() -> None:
    """Not django's DataError with PL/pgSQL context lines: the library's own exception, exported."""
    from pgflow_django import FlowNotFound

    val("select count(pgflow.delete_flow_and_data(flow_slug)) from pgflow.flows where flow_slug = 'cmd_boom'")
    with override_settings(PGFLOW={"FLOWS": list(REGISTERED)}):
        with pytest.raises(FlowNotFound) as caught, transaction.atomic():
            start_flow("cmd_gret", {})
        message = str(caught.value)
        assert "\n" not in message and "PL/pgSQL" not in message
        assert message.startswith("no flow 'cmd_gret' (known flows: ")
        assert "cmd_boom, cmd_greet, cmd_squares" in message
        assert message.endswith("did you mean 'cmd_greet'?")
        with pytest.raises(FlowNotFound, match="no flow 'cmd_gret'"), transaction.atomic():
            start_flows("cmd_gret", [{}, {}])
        with (
            pytest.raises(
                FlowNotFound, match=r"flow 'cmd_boom' is registered but not compiled .*pgflow_compile"
            ),
            transaction.atomic(),
        ):
            start_flow("cmd_boom", {})
    assert issubclass(FlowNotFound, LookupError)


def test_invalid_slug_and_run_id_are_refused_before_sql(orders: Flow) -> None:
    with pytest.raises(InvalidSlug):
        start_flow("not-a-slug", {})
    with pytest.raises(ValueError, match="run id 'nope' is not a UUID"):
        start_flow(orders, {}, run_id="nope")


# -- start_flows ---------------------------------------------------------------------------------------


def test_start_flows_starts_one_run_per_input_in_one_call(orders: Flow) -> None:
    inputs = [{"n": n} for n in range(5)]
    with connection.execute_wrapper(count_statements := StatementCounter()):
        run_ids = start_flows(orders, inputs)
    assert count_statements.calls == 1
    assert len(set(run_ids)) == 5
    assert [get_run(run_id).input for run_id in run_ids] == inputs
    assert len(live_ids("client_orders")) == 5


def test_start_flows_with_chosen_ids_and_generators(orders: Flow) -> None:
    chosen = [uuid.uuid4(), uuid.uuid4()]
    assert start_flows("client_orders", (n for n in range(2)), run_ids=chosen) == chosen
    assert get_run(chosen[1]).input == 1


def test_start_flows_with_no_inputs_does_nothing(orders: Flow) -> None:
    with connection.execute_wrapper(count_statements := StatementCounter()):
        assert start_flows(orders, []) == []
    assert count_statements.calls == 0


def test_start_flows_checks_every_input_first(orders: Flow) -> None:
    before = run_count()
    with pytest.raises(InvalidInput, match=r"^input #2 of flow 'client_orders' is not JSON-serialisable"):
        start_flows(orders, [{}, {}, {"bad": object()}])
    with pytest.raises(ValueError, match="got 2 inputs but 1 run_ids"):
        start_flows(orders, [{}, {}], run_ids=[uuid.uuid4()])
    assert run_count() == before


def test_start_flows_root_map_checks_every_input() -> None:
    flow = fan_out_flow()
    compile_flow(flow)
    with pytest.raises(InvalidInput, match=r"^input #1 of flow 'client_fan_out' must be a JSON array"):
        start_flows(flow, [[1], "x"])


class StatementCounter:
    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        self.calls += 1
        return execute(sql, params, many, context)


# -- get_run -------------------------------------------------------------------------------------------


def test_get_run_shows_outputs_as_steps_complete(orders: Flow) -> None:
    run_id = start_flow(orders, {"id": 7})
    run_step("client_orders", "validate", ["a", "b"])
    view = get_run(run_id)
    assert view.step("validate").status == "completed"
    assert view.step("validate").output == ["a", "b"]
    assert view.step("notify").status == "started"
    assert view.step("notify").initial_tasks == 2
    assert view.outputs == {"validate": ["a", "b"]}
    assert not view.is_terminal

    run_step("client_orders", "notify", lambda index: {"sent": index})
    run_step("client_orders", "summarize", 0)
    view = get_run(run_id)
    assert view.status == "completed"
    assert view.is_terminal
    assert view.completed_at is not None
    assert view.step("notify").output == [{"sent": 0}, {"sent": 1}]
    assert view.step("summarize").output == 0
    assert view.output == {"summarize": 0}
    assert view.outputs == {"validate": ["a", "b"], "notify": [{"sent": 0}, {"sent": 1}], "summarize": 0}


def test_get_run_of_a_failed_run(orders: Flow) -> None:
    run_id = start_flow(orders, {})
    (record,) = claim("client_orders")
    assert fail(record, "card declined") == "failed"
    view = get_run(run_id)
    assert view.status == "failed"
    assert view.is_terminal
    assert view.failed_at is not None
    assert "card declined" in (view.error_message or "")
    assert view.step("validate").status == "failed"


def test_get_run_unknown_id() -> None:
    missing = uuid.uuid4()
    with pytest.raises(RunNotFound, match=rf"no run {missing}: check the id, or commit"):
        get_run(missing)


def test_run_view_step_lookup_lists_the_steps(orders: Flow) -> None:
    view = get_run(start_flow(orders, {}))
    with pytest.raises(KeyError, match=r"has no step 'nope' \(steps: validate, notify, summarize\)"):
        view.step("nope")


# -- wait_for_run --------------------------------------------------------------------------------------


def test_wait_for_a_terminal_run_returns_at_once(orders: Flow) -> None:
    run_id = start_flow(orders, {})
    (record,) = claim("client_orders")
    complete(record, [])
    run_step("client_orders", "summarize", "done")
    started = time.monotonic()
    view = wait_for_run(run_id, timeout=5)
    assert isinstance(view, RunView)
    assert view.status == "completed"
    assert time.monotonic() - started < 1


def test_wait_for_run_times_out_with_what_is_pending(orders: Flow) -> None:
    run_id = start_flow(orders, {})
    started = time.monotonic()
    with pytest.raises(
        TimeoutError, match=r"is still started after 0.3s \(unfinished steps: validate, notify, summ"
    ):
        wait_for_run(run_id, timeout=0.3, poll=0.05)
    assert 0.3 <= time.monotonic() - started < 2


def test_wait_for_run_unknown_id_and_bad_arguments() -> None:
    with pytest.raises(RunNotFound):
        wait_for_run(uuid.uuid4(), timeout=0.1)
    with pytest.raises(ValueError, match="poll > 0"):
        wait_for_run(uuid.uuid4(), poll=0)


@pytest.mark.django_db(transaction=True)
def test_wait_for_run_sees_another_connection_finish_the_run() -> None:
    """Committed work of a worker on its own connection ends the wait; an uncommitted start is invisible."""
    flow = orders_flow("client_waited")
    compile_flow(flow)
    try:
        with transaction.atomic():
            run_id = start_flow(flow, {"id": 1})
            assert not visible_elsewhere(run_id)
        assert visible_elsewhere(run_id)

        def worker() -> None:
            try:
                time.sleep(0.3)
                run_step("client_waited", "validate", [])
                run_step("client_waited", "summarize", "done")
            finally:
                connection.close()

        thread = threading.Thread(target=worker)
        thread.start()
        view = wait_for_run(run_id, timeout=10, poll=0.05)
        thread.join(10)
        assert view.status == "completed"
        assert view.output == {"summarize": "done"}
        assert view.step("notify").output == []
    finally:
        with connection.cursor() as cursor:
            cursor.execute("select pgflow.delete_flow_and_data('client_waited')")


def visible_elsewhere(run_id: uuid.UUID) -> bool:
    found: list[bool] = []

    def look() -> None:
        try:
            found.append(bool(val("select count(*) as n from pgflow.runs where run_id = %s", [run_id])))
        finally:
            connection.close()

    thread = threading.Thread(target=look)
    thread.start()
    thread.join(10)
    return found == [True]
