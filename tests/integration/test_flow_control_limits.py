"""Concurrency keys and rate limits from Python (issue 22, items 2, 3 and 6): the DSL checks them when
the flow is defined, every compile stores them, a callable key is computed where the run starts and
stored with it, and the docs' examples, ``pgflow_limits`` and the admin show what each key holds."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from io import StringIO
from pathlib import Path
from typing import Any

import psycopg
import pytest
from django.core.management import call_command
from django.db import connection
from django.test import Client

from pgflow_django import Concurrency, Flow, FlowDefinitionError, RateLimit, start_flow, start_flows
from pgflow_django.flows.compiler import compile_flow
from pgflow_django.runs.run_keys import KeyFailed
from pgflow_django.testing import Run, run_flow
from tests.integration.test_admin import page
from tests.sql.limit_claim.support import outcomes
from tests.sql.support import q
from tests.workers import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

DOC = Path(__file__).resolve().parents[2] / "docs" / "flow-control.md"
FLOWS = ("doc_tenant_reports", "doc_mail", "doc_payouts", "lim_key_fails", "lim_keys")


@pytest.fixture(autouse=True)
def _clean() -> Iterator[None]:
    drop = "select pgflow.delete_flow_and_data(flow_slug) from pgflow.flows where flow_slug = any(%s)"
    q(drop, [list(FLOWS)])
    yield
    q(drop, [list(FLOWS)])


def hello(flow_input: Any) -> None:
    return None


def _example(marker: str) -> dict[str, Any]:
    doc = DOC.read_text(encoding="utf-8")
    [block] = [b for b in re.findall(r"```python\n(.*?)```", doc, re.S) if marker in b]
    scope: dict[str, Any] = {}
    exec(compile(block, "docs/flow-control.md", "exec"), scope)
    return scope


def _keys(flow: str) -> list[tuple[str, str, str, str]]:
    return [
        (row["tenant"], row["step_slug"], row["kind"], row["key"])
        for row in q(
            "select r.input ->> 'tenant_id' as tenant, k.step_slug, k.kind, k.key"
            " from pgflow.run_limit_keys as k join pgflow.runs as r using (run_id)"
            " where r.flow_slug = %s order by 1, 2",
            [flow],
        )
    ]


def test_the_concurrency_example_limits_each_tenant_and_stores_the_callable_key() -> None:
    _example("doc_tenant_reports")
    limits = q("select step_slug, kind, key_source, key_field, amount from pgflow.flow_limits order by 1")
    assert limits == [
        {
            "step_slug": "",
            "kind": "concurrency",
            "key_source": "input",
            "key_field": "tenant_id",
            "amount": 2,
        },
        {
            "step_slug": "upload",
            "kind": "concurrency",
            "key_source": "stored",
            "key_field": None,
            "amount": 1,
        },
    ]
    assert sorted(set(_keys("doc_tenant_reports"))) == [
        ("acme-eu", "upload", "concurrency", "eu"),
        ("initech-us", "upload", "concurrency", "us"),
    ]
    got = outcomes("doc_tenant_reports")
    assert (len(got["claimed"]), len(got["deferred"])) == (3, 1), "two acme-eu runs and initech-us start"


def test_the_rate_example_stores_a_bucket_per_step() -> None:
    _example("doc_mail")
    rows = q("select step_slug, kind, key_source, amount, period, burst from pgflow.flow_limits order by 1")
    assert rows == [
        {
            "step_slug": "receipt",
            "kind": "rate",
            "key_source": "input",
            "amount": 10,
            "period": 1.0,
            "burst": 5,
        },
        {
            "step_slug": "send",
            "kind": "rate",
            "key_source": "none",
            "amount": 100,
            "period": 60.0,
            "burst": 1,
        },
    ]
    assert outcomes("doc_mail") == {
        "claimed": [q("select message_id from pgflow.step_tasks")[0]["message_id"]]
    }


def test_the_exclusive_handler_example_waits_for_the_old_handlers_lock() -> None:
    payouts = _example("doc_payouts")["payouts"]
    finished: list[Run] = []

    def next_handler() -> None:
        try:
            finished.append(run_flow(payouts, {"account": "acme", "amount": 5}))
        finally:
            connection.close()

    with psycopg.connect(**connection.get_connection_params()) as old_handler:
        old_handler.execute("select pg_advisory_xact_lock(hashtext(%s))", ["payouts:acme"])
        thread = threading.Thread(target=next_handler)
        thread.start()
        wait_until(
            lambda: q(
                "select 1 from pg_locks where locktype = 'advisory' and not granted"
                " and database = (select oid from pg_database where datname = current_database())"
            ),
            timeout=10,
            what="the next handler waiting for the old one's lock",
        )
        assert thread.is_alive() and not finished
        old_handler.rollback()  # the old handler's transaction ends
        thread.join(10)
    assert [run.status for run in finished] == ["completed"]
    assert finished[0].step("pay").output == {"paid": 5}


@pytest.mark.parametrize(
    ("spec", "problem"),
    [
        ("100 per minute", "is not a rate"),
        ("100/min", "is not a rate"),
        ("0/s", "is not a rate"),
        ("10/0s", "is not a rate"),
        (" 10/s", "is not a rate"),
        (100, "is not a rate"),
        ("9999999999/s", "is too large"),
    ],
)
def test_a_bad_rate_is_one_line_when_the_flow_is_defined(spec: object, problem: str) -> None:
    flow = Flow("lim_keys")
    with pytest.raises(FlowDefinitionError) as caught:
        flow.step(rate_limit=spec)(hello)  # type: ignore[arg-type]
    message = str(caught.value)
    assert "\n" not in message and problem in message and "step 'hello' of flow 'lim_keys'" in message
    assert 'e.g. "100/m"' in message or "at most" in message


@pytest.mark.parametrize(
    "options",
    [
        {"concurrency": Concurrency(limit=0)},
        {"concurrency": Concurrency(limit=2, key="")},
        {"concurrency": 3},
        {"rate_limit": RateLimit("1/s", burst=0)},
    ],
)
def test_a_bad_limit_is_refused_when_the_flow_is_defined(options: dict[str, Any]) -> None:
    with pytest.raises(FlowDefinitionError) as caught:
        Flow("lim_keys", **options)
    assert "\n" not in str(caught.value) and "flow 'lim_keys'" in str(caught.value)


def test_a_key_that_raises_starts_nothing() -> None:
    flow = Flow(
        "lim_key_fails", concurrency=Concurrency(limit=1, key=lambda flow_input: flow_input["tenant"])
    )
    flow.step()(hello)
    compile_flow(flow)
    with pytest.raises(KeyFailed) as caught:
        start_flows(flow, [{"tenant": "a"}, {}])
    assert "KeyError" in str(caught.value) and "nothing was started" in str(caught.value)
    assert q("select run_id from pgflow.runs where flow_slug = 'lim_key_fails'") == []


@pytest.mark.parametrize("key", ["\ud800", "a\x00b"], ids=["lone surrogate", "NUL"])
def test_a_key_postgresql_cannot_store_starts_nothing(key: str) -> None:
    flow = Flow("lim_key_fails", concurrency=Concurrency(limit=1, key=lambda flow_input: key))
    flow.step()(hello)
    compile_flow(flow)
    expected = (
        f"the concurrency key of the flow of flow 'lim_key_fails' is {key!r}, which PostgreSQL cannot "
        "store (NUL or a lone surrogate); fix the key function (nothing was started)"
    )
    with pytest.raises(KeyFailed) as one:
        start_flow(flow, {})
    with pytest.raises(KeyFailed) as many:
        start_flows(flow, [{}, {}], idempotency_keys=["a", "b"])
    assert str(one.value) == str(many.value) == expected
    assert q("select run_id from pgflow.runs where flow_slug = 'lim_key_fails'") == []


def test_keys_are_stored_for_every_start_path() -> None:
    flow = Flow(
        "lim_keys", concurrency=Concurrency(limit=1, key=lambda flow_input: flow_input["tenant_id"].upper())
    )
    flow.step()(hello)
    compile_flow(flow)
    start_flow(flow, {"tenant_id": "a"})
    start_flow("lim_keys", {"tenant_id": "b"})
    start_flow(flow, {"tenant_id": "c"}, idempotency_key="c")
    start_flows(flow, [{"tenant_id": "d"}, {"tenant_id": "e"}])
    start_flows(flow, [{"tenant_id": "f"}], idempotency_keys=["f"])
    assert [key for *_, key in _keys("lim_keys")] == ["A", "C", "D", "E", "F"], (
        "a bare slug finds no registered flow here: its run shares the key ''"
    )


def test_pgflow_limits_shows_each_keys_started_and_deferred_tasks(admin_client: Client) -> None:
    _example("doc_tenant_reports")
    outcomes("doc_tenant_reports")
    out = StringIO()
    call_command("pgflow_limits", "--format", "json", stdout=out)
    rows = json.loads(out.getvalue())
    by_key = {(row["step_slug"], row["key"]): (row["started"], row["deferred"]) for row in rows}
    assert by_key[(None, "acme-eu")] == (2, 1)
    assert by_key[(None, "initech-us")] == (1, 0)
    assert by_key[("upload", None)] == (0, 0), "a limit no claim has met yet"
    text = StringIO()
    call_command("pgflow_limits", "--flow", "doc_tenant_reports", stdout=text)
    assert "concurrency 2 per tenant_id" in text.getvalue() and "'acme-eu'" in text.getvalue()
    html = page(admin_client, "/admin/pgflow/run/dashboard/")
    assert "Concurrency keys and rate limits" in html and "&#x27;acme-eu&#x27;" in html
    flow_page = page(admin_client, "/admin/pgflow/flow/doc_tenant_reports/change/")
    assert "concurrency 1 per key from the start" in flow_page
