"""A stand-in for a payment provider's client: a real one calls the provider's HTTP API."""


class GatewayBusy(Exception):
    def __init__(self, retry_after):
        super().__init__(f"payment gateway busy, retry in {retry_after}s")
        self.retry_after = retry_after


def charge(card, amount_cents, idempotency_key):
    """Charge ``card``; the provider charges one ``idempotency_key`` at most once."""
    if card == "tok_busy":
        raise GatewayBusy(retry_after=5)
    return {"id": f"pay_{idempotency_key[:8]}", "captured": card != "tok_declined"}
