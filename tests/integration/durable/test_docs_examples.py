"""docs/durable.md's examples, run as written; ``test_every_block_is_tested`` checks that every line of
the page's Python blocks (imports and comments aside) is in this file or ``docs_flows.py``."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

from django.test import TestCase

from pgflow_django import compile_flow, get_run, send_event
from pgflow_django.testing import advance, drain, run_flow
from pgflow_django.testing import send_event as send_and_drain
from tests.integration.durable.docs_flows import approval, orders, reminder

HERE = Path(__file__).resolve().parent
DOC = HERE.parents[2] / "docs" / "durable.md"


class ApprovalTests(TestCase):
    def test_an_approved_order_ships(self):
        run = run_flow(approval, {"order_id": 1042, "total": 99})
        assert run.status == "started"
        assert run.step("approved").waiting.event == "order.approved"
        assert run.step("approved").waiting.key == "1042"

        assert send_and_drain("order.approved", {"by": "ada"}, key=1042, flows=[approval]) == 1

        run = get_run(run.run_id)
        assert run.status == "completed"
        assert run.outputs["ship"] == {"shipped": True, "approved_by": "ada"}

    def test_an_order_nobody_approves_is_skipped_after_three_days(self):
        run = run_flow(approval, {"order_id": 7, "total": 5})

        advance(3 * 24 * 3600)
        drain(flows=[approval])

        run = get_run(run.run_id)
        assert run.status == "completed"
        assert run.step("approved").status == "skipped"
        assert run.step("ship").status == "skipped"

    def test_an_approval_sent_before_the_wait_is_kept_for_it(self):
        compile_flow(approval)
        assert send_event("order.approved", {"by": "grace"}, key=55) == 0  # no run waits yet: kept

        run = run_flow(approval, {"order_id": 55, "total": 12})
        assert run.outputs["approved"] == {"by": "grace"}

    def test_the_send_from_a_view_completes_the_wait(self):
        run = run_flow(approval, {"order_id": 1042, "total": 99})

        send_event("order.approved", {"by": "ada"}, key=1042)
        drain(flows=[approval])  # what a worker's wait pass does when the send commits

        assert get_run(run.run_id).step("approved").output == {"by": "ada"}

    def test_a_repeated_event_id_is_a_no_op(self):
        run = run_flow(approval, {"order_id": 8, "total": 1})
        assert send_event("order.approved", {"by": "ada"}, run_id=run.run_id, event_id="approval-8") == 1
        assert send_event("order.approved", {"by": "bob"}, run_id=run.run_id, event_id="approval-8") == 0


class ReminderTests(TestCase):
    def test_the_reminder_goes_out_after_the_trial(self):
        run = run_flow(reminder, {"email": "ada@example.com", "trial_ends": "2030-01-01T09:00:00Z"})
        assert run.step("a_day_later").waiting.until is not None

        advance(24 * 3600)
        drain(flows=[reminder])
        assert get_run(run.run_id).status == "started"  # the trial has not ended yet

        advance((run.step("until_trial_ends").waiting.until - run.started_at).total_seconds())
        drain(flows=[reminder])
        run = get_run(run.run_id)
        assert run.status == "completed"
        assert run.outputs["remind"] == {"sent_to": "ada@example.com"}
        assert set(run.outputs["until_trial_ends"]) == {"slept_until"}


class ParcelTests(TestCase):
    def test_each_parcel_ships_in_a_child_run(self):
        run = run_flow(orders, {"parcels": [{"id": 1}, {"id": 2}]})

        assert run.status == "completed"
        assert run.outputs["confirm"] == {"tracking": ["TRK-1", "TRK-2"]}
        assert len(run.child_run_ids) == 2
        child = get_run(run.child_run_ids[0])
        assert child.parent_run_id == run.run_id
        assert child.outputs["notify_customer"] == {"tracking": "TRK-1", "notified": True}


def _blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)


def test_every_block_is_tested() -> None:
    tested = {
        line.strip()
        for path in (HERE / "test_docs_examples.py", HERE / "docs_flows.py")
        for line in path.read_text(encoding="utf-8").splitlines()
    }
    blocks = _blocks()
    assert len(blocks) >= 3
    for block in blocks:
        for line in textwrap.dedent(block).splitlines():
            if line.strip() and not line.lstrip().startswith(("#", "from ", "import ")):
                assert line.strip() in tested, f"docs/durable.md line not in the tested examples: {line!r}"
