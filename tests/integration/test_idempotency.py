"""Idempotency keys and reused run ids (issue 22 item 4): one key of one flow is one run while that
run exists, concurrent starts with one key agree on it, and a reused run id is the same run only for
the same flow and input."""

from __future__ import annotations

import re
import threading
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from django.db import connections, transaction

from pgflow_django import RunIdInUse, cancel_run, start_flow, start_flows
from pgflow_django.flows.compiler import compile_flow
from pgflow_django.runs.client import idempotency_run_id
from pgflow_django.runs.operations import prune
from pgflow_django.signals import run_started
from tests.integration import commands_flows
from tests.integration.commands_support import drop_command_flows
from tests.sql.support import q, q1
from tests.workers import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

FLOW = "cmd_greet"
OTHER = "cmd_squares"


@pytest.fixture(autouse=True)
def flows() -> Iterator[None]:
    compile_flow(commands_flows.greet)
    compile_flow(commands_flows.squares)
    yield
    drop_command_flows()


def runs(flow: str = FLOW) -> list[dict[str, object]]:
    return q("select run_id, input from pgflow.runs where flow_slug = %s order by started_at", [flow])


def test_one_key_is_one_run_whatever_the_later_input() -> None:
    first = start_flow(FLOW, {"name": "ada"}, idempotency_key="order-123")
    assert start_flow(FLOW, {"name": "ada"}, idempotency_key="order-123") == first
    assert start_flow(FLOW, {"name": "bob"}, idempotency_key="order-123") == first
    assert runs() == [{"run_id": first, "input": {"name": "ada"}}]
    assert start_flow(FLOW, {"name": "ada"}, idempotency_key="order-124") != first
    assert len(runs()) == 2


def test_the_docs_example_runs() -> None:
    doc = (Path(__file__).resolve().parents[2] / "docs" / "flow-control.md").read_text(encoding="utf-8")
    [example] = [
        block
        for block in re.findall(r"```python\n(.*?)```", doc, re.S)
        if "idempotency_key" in block and "start_flow(" in block
    ]
    exec(compile(example, "docs/flow-control.md", "exec"), {})
    assert len(runs()) == 1


def test_only_the_start_that_made_the_run_signals_it() -> None:
    started: list[object] = []

    def receiver(sender: object, run_id: object, **kwargs: object) -> None:
        started.append(run_id)

    run_started.connect(receiver)
    try:
        first = start_flow(FLOW, {"name": "ada"}, idempotency_key="signal")
        start_flow(FLOW, {"name": "ada"}, idempotency_key="signal")
    finally:
        run_started.disconnect(receiver)
    assert started == [first]


def test_a_key_belongs_to_its_flow() -> None:
    greet = start_flow(FLOW, {"name": "ada"}, idempotency_key="k")
    squares = start_flow(OTHER, [1, 2], idempotency_key="k")
    assert greet != squares
    assert [run["run_id"] for run in runs(OTHER)] == [squares]


def test_a_pruned_run_frees_its_key_and_a_running_one_keeps_it() -> None:
    first = start_flow(FLOW, {"name": "ada"}, idempotency_key="order-9")
    assert prune(timedelta(0)).runs == 0, "a run still going is never pruned"
    assert start_flow(FLOW, {"name": "ada"}, idempotency_key="order-9") == first
    cancel_run(first)
    assert prune(timedelta(0)).runs == 1
    again = start_flow(FLOW, {"name": "ada"}, idempotency_key="order-9")
    assert again == first == idempotency_run_id(FLOW, "order-9")
    assert len(runs()) == 1


def test_a_reused_run_id_is_the_same_run_only_for_the_same_input() -> None:
    chosen = uuid.uuid4()
    assert start_flow(FLOW, {"name": "ada"}, run_id=chosen) == chosen
    assert start_flow(FLOW, {"name": "ada"}, run_id=str(chosen)) == chosen
    with transaction.atomic():
        with pytest.raises(RunIdInUse, match=f"run id {chosen} already names a run with another input"):
            start_flow(FLOW, {"name": "bob"}, run_id=chosen)
        assert q1("select count(*) as n from pgflow.runs where flow_slug = %s", [FLOW]) == {"n": 1}
    with pytest.raises(RunIdInUse, match="of flow 'cmd_greet'"):
        start_flow(OTHER, [1], run_id=chosen)
    assert runs() == [{"run_id": chosen, "input": {"name": "ada"}}]


def test_a_key_and_a_run_id_together_are_refused() -> None:
    with pytest.raises(ValueError, match="run_id or idempotency_key, not both"):
        start_flow(FLOW, {}, run_id=uuid.uuid4(), idempotency_key="k")
    with pytest.raises(ValueError, match="idempotency_key must be a non-empty string"):
        start_flow(FLOW, {}, idempotency_key="")
    assert runs() == []


@pytest.mark.parametrize("key", ["\ud800", "order-\udcff", "\ud83d\ude00"], ids=["high", "low", "split pair"])
def test_a_key_with_a_lone_surrogate_is_one_value_error_line(key: str) -> None:
    surrogate = next(char for char in key if "\ud800" <= char <= "\udfff")
    reason = (
        rf"is not valid UTF-8 text \(it holds a lone surrogate, \\u{ord(surrogate):04x}\); pass plain text$"
    )
    with pytest.raises(ValueError, match=f"^idempotency_key {reason}") as one:
        start_flow(FLOW, {}, idempotency_key=key)
    with pytest.raises(ValueError, match=f"^idempotency_keys\\[1\\] {reason}") as many:
        start_flows(FLOW, [{}, {}], idempotency_keys=["fine", key])
    for caught in (one, many):
        assert type(caught.value) is ValueError and "\n" not in str(caught.value)
    assert runs() == []
    assert start_flow(FLOW, {}, idempotency_key="\U0001f600") == idempotency_run_id(FLOW, "\U0001f600")


def test_concurrent_starts_with_one_key_get_the_first_committed_run() -> None:
    first_started = threading.Event()
    commit_first = threading.Event()
    results: dict[str, object] = {}

    def first() -> None:
        try:
            with transaction.atomic():
                results["first"] = start_flow(FLOW, {"name": "ada"}, idempotency_key="race")
                first_started.set()
                assert commit_first.wait(10)
        finally:
            connections.close_all()

    def second() -> None:
        try:
            results["second"] = start_flow(FLOW, {"name": "ada"}, idempotency_key="race")
        except BaseException as exc:
            results["second"] = exc
        finally:
            connections.close_all()

    a = threading.Thread(target=first)
    a.start()
    assert first_started.wait(10)
    b = threading.Thread(target=second)
    b.start()
    # the second start waits on the first's uncommitted row of the same run id
    wait_until(
        lambda: q1(
            "select count(*) as n from pg_stat_activity where datname = current_database() "
            "and wait_event_type = 'Lock' and query like '%%start_flow%%'"
        )["n"],
        10,
        "the second start to wait for the first",
    )
    assert "second" not in results
    commit_first.set()
    a.join(10)
    b.join(10)
    assert results["second"] == results["first"]
    assert [run["run_id"] for run in runs()] == [results["first"]]


def test_concurrent_starts_when_the_first_rolls_back_start_one_run() -> None:
    first_started = threading.Event()
    results: dict[str, object] = {}

    class Rollback(Exception):
        pass

    def first() -> None:
        try:
            with transaction.atomic():
                start_flow(FLOW, {"name": "ada"}, idempotency_key="race")
                first_started.set()
                wait_until(lambda: "waiting" in results, 10, "the second start to wait")
                raise Rollback
        except Rollback:
            pass
        finally:
            connections.close_all()

    def second() -> None:
        try:
            results["second"] = start_flow(FLOW, {"name": "bob"}, idempotency_key="race")
        finally:
            connections.close_all()

    a = threading.Thread(target=first)
    a.start()
    assert first_started.wait(10)
    b = threading.Thread(target=second)
    b.start()
    wait_until(
        lambda: q1(
            "select count(*) as n from pg_stat_activity where datname = current_database() "
            "and wait_event_type = 'Lock' and query like '%%start_flow%%'"
        )["n"],
        10,
        "the second start to wait for the first",
    )
    results["waiting"] = True
    a.join(10)
    b.join(10)
    assert runs() == [{"run_id": results["second"], "input": {"name": "bob"}}]


def test_start_flows_starts_only_the_keys_without_a_run() -> None:
    old = start_flow(FLOW, {"name": "ada"}, idempotency_key="a")
    ids = start_flows(FLOW, [{"name": "x"}, {"name": "b"}, {"name": "b2"}], idempotency_keys=["a", "b", "b"])
    assert ids[0] == old and ids[1] == ids[2] == idempotency_run_id(FLOW, "b")
    assert runs() == [{"run_id": old, "input": {"name": "ada"}}, {"run_id": ids[1], "input": {"name": "b"}}]
    assert start_flows(FLOW, [{}, {}], idempotency_keys=["b", "a"]) == [ids[1], old]
    assert len(runs()) == 2
    with pytest.raises(ValueError, match="2 inputs but 1 idempotency_keys"):
        start_flows(FLOW, [{}, {}], idempotency_keys=["a"])
    with pytest.raises(ValueError, match="run_ids or idempotency_keys, not both"):
        start_flows(FLOW, [{}], run_ids=[uuid.uuid4()], idempotency_keys=["a"])


def test_a_keyed_batch_waiting_on_a_concurrent_start_takes_its_run_and_starts_the_rest() -> None:
    first_started = threading.Event()
    commit_first = threading.Event()
    results: dict[str, object] = {}

    def first() -> None:
        try:
            with transaction.atomic():
                results["first"] = start_flow(FLOW, {"name": "ada"}, idempotency_key="k1")
                first_started.set()
                assert commit_first.wait(10)
        finally:
            connections.close_all()

    def batch() -> None:
        try:
            results["batch"] = start_flows(
                FLOW, [{"name": "x"}, {"name": "y"}], idempotency_keys=["k1", "k2"]
            )
        finally:
            connections.close_all()

    a = threading.Thread(target=first)
    a.start()
    assert first_started.wait(10)
    b = threading.Thread(target=batch)
    b.start()
    wait_until(
        lambda: q1(
            "select count(*) as n from pg_stat_activity where datname = current_database() "
            "and wait_event_type = 'Lock' and query like '%%start_flows%%'"
        )["n"],
        10,
        "the batch to wait for the first start",
    )
    commit_first.set()
    a.join(10)
    b.join(10)
    assert results["batch"] == [results["first"], idempotency_run_id(FLOW, "k2")]
    assert runs() == [
        {"run_id": results["first"], "input": {"name": "ada"}},
        {"run_id": idempotency_run_id(FLOW, "k2"), "input": {"name": "y"}},
    ]
