"""The async views docs/async.md shows, served by a real ASGI server (uvicorn) in
``tests/integration/test_async_client_asgi.py``; every line of that page's "Async client API" blocks
is copied from here or from that test (a test checks it)."""

from __future__ import annotations

from asgiref.sync import sync_to_async
from django.db import transaction
from django.http import JsonResponse
from django.urls import path

from pgflow_django import Flow, astart_flow, await_run, start_flow
from testproject.example.models import LedgerEntry

quote = Flow("async_quote")


@quote.step()
def price(order):
    return {"sku": order["sku"], "total": 3 * order["quantity"]}


async def get_quote(request):
    run_id = await astart_flow(quote, {"sku": request.GET["sku"], "quantity": int(request.GET["quantity"])})
    run = await await_run(run_id, timeout=10)
    return JsonResponse({"status": run.status, "quote": run.output["price"]})


@sync_to_async
def save_order(sku, quantity):
    with transaction.atomic():
        run_id = start_flow(quote, {"sku": sku, "quantity": quantity})
        LedgerEntry.objects.create(flow="orders", key=sku)  # a failure here: no order, no run
    return run_id


async def place_order(request):
    run_id = await save_order(request.POST["sku"], int(request.POST["quantity"]))
    run = await await_run(run_id, timeout=10)
    return JsonResponse({"run_id": str(run_id), "quote": run.output["price"]})


urlpatterns = [path("quote/", get_quote), path("orders/", place_order)]
