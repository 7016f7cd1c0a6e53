"""The flow ``make demo`` runs: a map step, a condition and a failure that succeeds on retry.

Handlers do no real work (the demo measures the engine, not sleeps); what they compute is
deterministic, so a re-run of the demo takes the same paths.
"""

from __future__ import annotations

from typing import Any

from pgflow_django import Flow

VIP_THRESHOLD_CENTS = 35_000
FLAKY_EVERY = 5
"""One charge in five fails on its first attempt, then succeeds when retried."""

demo_orders = Flow("demo_orders", max_attempts=3, base_delay=1, timeout=30)


class PaymentGatewayTimeout(RuntimeError):
    """The transient error the flaky step raises on its first attempt."""


@demo_orders.step()
def load_items(order: dict[str, Any]) -> list[dict[str, Any]]:
    """Root step: the order's lines become the array the map step fans out over."""
    return list(order["items"])


@demo_orders.map(array=load_items)
def price_line(item: dict[str, Any]) -> int:
    """Map step: one task per order line."""
    return int(item["qty"]) * int(item["price_cents"])


@demo_orders.step(depends_on=[price_line])
def charge(deps: dict[str, Any], ctx: Any) -> dict[str, Any]:
    """Fails on the first attempt for every fifth total; the retry (2 s later) succeeds."""
    total = sum(deps["price_line"])
    if ctx.attempt == 1 and total % FLAKY_EVERY == 0:
        raise PaymentGatewayTimeout(f"gateway timed out charging {total} cents")
    return {"total_cents": total, "vip": total >= VIP_THRESHOLD_CENTS, "attempt": ctx.attempt}


@demo_orders.step(depends_on=[charge], if_={"charge": {"vip": True}})
def add_gift(deps: dict[str, Any]) -> dict[str, Any]:
    """Runs only for VIP orders; the condition skips it for the others."""
    return {"gift": "tote bag", "for_total_cents": deps["charge"]["total_cents"]}


@demo_orders.step(depends_on=[charge])
def send_receipt(deps: dict[str, Any]) -> dict[str, Any]:
    return {"sent": True, "total_cents": deps["charge"]["total_cents"]}
