"""The flow and view that docs/testing.md tests; every block of that page is copied from here or from
``test_docs_examples.py`` (a test checks it)."""

from __future__ import annotations

from django.db import transaction
from django.http import HttpResponse

from pgflow_django import Flow, start_flow
from testproject.example.models import LedgerEntry

checkout = Flow("docs_checkout", max_attempts=3, base_delay=30)


@checkout.step()
def lines(order):
    if not order.get("items"):
        raise ValueError("an order needs items")
    return order["items"]


@checkout.map(array=lines)
def reserve(item):
    return {"sku": item["sku"], "reserved": True}


@checkout.step(depends_on=[reserve], atomic=True)
def charge(deps, ctx):
    LedgerEntry.objects.create(flow=ctx.flow_slug, key=str(ctx.run_id), attempt=ctx.attempt)
    return {"charged": len(deps["reserve"])}


def place_order(request):
    with transaction.atomic():
        LedgerEntry.objects.create(flow="orders", key=request.POST["sku"])
        start_flow(checkout, {"items": [{"sku": request.POST["sku"]}]})
    return HttpResponse(status=202)
