from django.core.mail import send_mail
from django.db.models import F

from pgflow_django import Flow, Retry

from . import payments
from .models import Order, OrderLine, Product

order_flow = Flow("shop_order", max_attempts=3, base_delay=2, timeout=30)


@order_flow.step()
def validate(order_input):
    lines = OrderLine.objects.filter(order_id=order_input["order_id"]).select_related("product")
    if not lines:
        raise ValueError(f"order {order_input['order_id']} has no lines")
    return [
        {
            "sku": line.product.sku,
            "quantity": line.quantity,
            "cents": line.product.price_cents * line.quantity,
        }
        for line in lines
    ]


@order_flow.step(depends_on=[validate])
def charge_payment(deps, ctx):
    order = Order.objects.get(pk=ctx.flow_input["order_id"])
    total = sum(line["cents"] for line in deps["validate"])
    try:
        payment = payments.charge(order.card, total, idempotency_key=str(ctx.run_id))
    except payments.GatewayBusy as busy:
        raise Retry(delay=busy.retry_after, message=str(busy)) from busy
    return {"payment_id": payment["id"], "captured": payment["captured"], "cents": total}


@order_flow.map(array=validate, atomic=True)
def reserve_stock(line):
    taken = Product.objects.filter(sku=line["sku"], stock__gte=line["quantity"]).update(
        stock=F("stock") - line["quantity"]
    )
    if not taken:
        raise ValueError(f"out of stock: {line['sku']}")
    return {"sku": line["sku"], "quantity": line["quantity"]}


@order_flow.step(
    depends_on=[charge_payment, reserve_stock],
    if_={"charge_payment": {"captured": True}},
    when_unmet="skip-cascade",
    atomic=True,
)
def confirm(deps, ctx):
    order = Order.objects.get(pk=ctx.flow_input["order_id"])
    order.status = "confirmed"
    order.payment_id = deps["charge_payment"]["payment_id"]
    order.save(update_fields=["status", "payment_id"])
    return {"order_id": order.pk, "email": order.email}


@order_flow.step(depends_on=[confirm])
def send_confirmation(deps):
    order = deps["confirm"]
    send_mail(
        subject=f"Order {order['order_id']} confirmed",
        message="Thank you! Your order is on its way.",
        from_email="shop@example.com",
        recipient_list=[order["email"]],
    )
    return {"sent_to": order["email"]}


@order_flow.step(
    depends_on=[charge_payment, reserve_stock],
    if_not={"charge_payment": {"captured": True}},
    atomic=True,
)
def decline(deps, ctx):
    for line in deps["reserve_stock"]:
        Product.objects.filter(sku=line["sku"]).update(stock=F("stock") + line["quantity"])
    Order.objects.filter(pk=ctx.flow_input["order_id"]).update(status="declined")
    return {"released": len(deps["reserve_stock"])}
