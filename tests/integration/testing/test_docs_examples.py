"""docs/testing.md's examples, run as written; ``test_every_block_is_tested`` checks that every line of
the page's Python blocks (imports and comments aside) is in this file or ``docs_flows.py``."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest
from django.test import RequestFactory, TestCase, TransactionTestCase, override_settings

from pgflow_django import compile_flow, start_flow, wait_for_run
from pgflow_django.testing import advance, drain, fail_next, override_handler, run_flow
from testproject.example.models import LedgerEntry
from tests.integration.testing.docs_flows import checkout, place_order
from tests.tasks_support import tasks_api

HERE = Path(__file__).resolve().parent
DOC = HERE.parents[2] / "docs" / "testing.md"
TaskResultStatus = tasks_api.TaskResultStatus


class CheckoutTests(TestCase):
    def test_an_order_is_charged(self):
        run = run_flow(checkout, {"items": [{"sku": "A1"}, {"sku": "B2"}]})

        assert run.status == "completed"
        assert run.outputs["charge"] == {"charged": 2}
        assert len(run.tasks_of("reserve")) == 2
        assert LedgerEntry.objects.filter(flow="docs_checkout").count() == 1

    def test_an_empty_order_fails_after_its_retries(self):
        run = run_flow(checkout, {"items": []})

        assert run.status == "failed"
        assert run.task("lines").attempts == 3
        assert run.task("lines").errors[-1] == "ValueError: an order needs items"


@override_settings(PGFLOW={"FLOWS": ["tests.integration.testing.docs_flows"]})
class PlaceOrderViewTests(TestCase):
    @classmethod
    def setUpTestData(cls):
        compile_flow(checkout)

    def test_the_view_starts_a_checkout(self):
        request = RequestFactory().post("/orders/", {"sku": "A1"})
        place_order(request)

        summary = drain()

        assert len(summary.completed) == 1
        assert LedgerEntry.objects.filter(flow="docs_checkout").count() == 1


class RetryTests(TestCase):
    @classmethod
    def setUpTestData(cls):
        compile_flow(checkout)

    def test_charge_recovers_from_two_failures(self):
        with fail_next(checkout, "charge", times=2, error=ConnectionError("card processor down")):
            run = run_flow(checkout, {"items": [{"sku": "A1"}]})

        assert run.status == "completed"
        assert run.task("charge").attempts == 3
        assert run.task("charge").errors == (
            "ConnectionError: card processor down",
            "ConnectionError: card processor down",
        )

    @override_handler(checkout, "reserve", lambda item: {"sku": item["sku"], "reserved": False})
    def test_with_a_fake_reservation(self):
        run = run_flow(checkout, {"items": [{"sku": "A1"}]})

        assert run.step("reserve").output == [{"sku": "A1", "reserved": False}]

    def test_a_delayed_order_waits_until_time_moves_on(self):
        start_flow(checkout, {"items": [{"sku": "A1"}]}, delay=3600)

        summary = drain(flows=[checkout], skip_delays=False)
        assert summary.tasks == 0 and len(summary.waiting) == 1

        advance(3600)
        assert len(drain(flows=[checkout]).completed) == 1


class TaskBackendTests(TestCase):
    def test_a_task_runs_on_drain(self):
        from testproject.example.tasks import add, always_fails

        ok = add.enqueue(2, 3)
        bad = always_fails.enqueue("no reason")
        drain()

        ok.refresh()
        bad.refresh()
        assert ok.status == TaskResultStatus.SUCCESSFUL
        assert ok.return_value == 5
        assert bad.status == TaskResultStatus.FAILED
        assert bad.errors[0].exception_class_path == "builtins.ValueError"


class CommittedCheckoutTests(TransactionTestCase):
    def test_an_order_is_charged_and_committed(self):
        run = run_flow(checkout, {"items": [{"sku": "A1"}]})

        assert run.status == "completed"

    def tearDown(self):
        from django.db import connection

        with connection.cursor() as cursor:
            cursor.execute("select pgflow.delete_flow_and_data('docs_checkout')")


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("clean_example_flows")
def test_with_a_real_worker(pgflow_worker):
    pgflow_worker("--flow", "example_chain")
    run_id = start_flow("example_chain", {"n": 1})
    assert wait_for_run(run_id, timeout=30).status == "completed"


@pytest.mark.django_db
def test_with_the_pgflow_fixture(pgflow):
    run = pgflow.run_flow(checkout, {"items": [{"sku": "A1"}]})

    assert run.status == "completed"


def _blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), re.DOTALL)


def test_every_block_is_tested() -> None:
    tested = {
        line.strip()
        for path in (HERE / "test_docs_examples.py", HERE / "docs_flows.py")
        for line in path.read_text(encoding="utf-8").splitlines()
    }
    blocks = _blocks()
    assert len(blocks) >= 6
    for block in blocks:
        for line in textwrap.dedent(block).splitlines():
            if line.strip() and not line.lstrip().startswith(("#", "from ", "import ")):
                assert line.strip() in tested, f"docs/testing.md line not in the tested examples: {line!r}"
