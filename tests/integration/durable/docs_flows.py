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


shipping = Flow("durable_shipping")


@shipping.step()
def book_courier(parcel):
    return {"tracking": f"TRK-{parcel['id']}"}


@shipping.step(depends_on=[book_courier])
def notify_customer(deps):
    return {"tracking": deps["book_courier"]["tracking"], "notified": True}


orders = Flow("durable_orders")


@orders.step()
def pack(order):
    return order["parcels"]


orders.subflow("ship", flow=shipping, array=pack)


@orders.step(depends_on=["ship"])
def confirm(deps):
    return {"tracking": [parcel["notify_customer"]["tracking"] for parcel in deps["ship"]]}
