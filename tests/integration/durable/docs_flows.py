"""The flows docs/durable.md shows; every block of that page is copied from here or from
``test_docs_examples.py`` (a test checks it)."""

from __future__ import annotations

from pgflow_django import Flow

approval = Flow("durable_approval")


@approval.step()
def request_approval(order):
    return {"order_id": order["order_id"], "total": order["total"]}


approval.wait_for_event(
    "approved",
    event="order.approved",
    key="$.order_id",
    depends_on=[request_approval],
    timeout=3 * 24 * 3600,
    when_timeout="skip-cascade",
)


@approval.step(depends_on=["approved"])
def ship(deps):
    return {"shipped": True, "approved_by": deps["approved"]["by"]}


reminder = Flow("durable_reminder")


@reminder.step()
def sign_up(user):
    return {"email": user["email"], "remind_at": user["trial_ends"]}


reminder.sleep("a_day_later", depends_on=[sign_up], seconds=24 * 3600)
reminder.sleep("until_trial_ends", depends_on=[sign_up], until="$.sign_up.remind_at")


@reminder.step(depends_on=["a_day_later", "until_trial_ends", sign_up])
def remind(deps):
    return {"sent_to": deps["sign_up"]["email"]}
