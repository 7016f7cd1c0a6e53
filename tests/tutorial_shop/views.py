import json

from django.db import transaction
from django.http import JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from pgflow_django import start_flow

from .flows import order_flow
from .models import Order, OrderLine, Product


@csrf_exempt  # an API for your shop's front end: put your own authentication here
@require_POST
def place_order(request):
    data = json.loads(request.body)
    with transaction.atomic():
        order = Order.objects.create(email=data["email"], card=data["card"])
        for line in data["lines"]:
            product = Product.objects.get(sku=line["sku"])
            OrderLine.objects.create(order=order, product=product, quantity=line["quantity"])
        order.run_id = start_flow(order_flow, {"order_id": order.pk})
        order.save(update_fields=["run_id"])
    return JsonResponse({"order_id": order.pk, "run_id": str(order.run_id)}, status=202)
