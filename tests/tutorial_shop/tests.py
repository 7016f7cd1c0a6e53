from django.core import mail
from django.test import TestCase

from pgflow_django import retry_run
from pgflow_django.testing import drain, fail_next, load_run, run_flow

from .flows import order_flow
from .models import Order, OrderLine, Product


class OrderFlowTests(TestCase):
    @classmethod
    def setUpTestData(cls):
        cls.mug = Product.objects.create(sku="MUG", price_cents=1200, stock=5)
        cls.tea = Product.objects.create(sku="TEA", price_cents=800, stock=5)

    def place(self, card):
        order = Order.objects.create(email="ada@example.com", card=card)
        OrderLine.objects.create(order=order, product=self.mug, quantity=2)
        OrderLine.objects.create(order=order, product=self.tea, quantity=1)
        return order

    def test_an_order_is_charged_reserved_and_confirmed(self):
        order = self.place(card="tok_visa")

        run = run_flow(order_flow, {"order_id": order.pk})

        assert run.status == "completed"
        assert run.step("charge_payment").output["cents"] == 3200
        assert len(run.tasks_of("reserve_stock")) == 2
        assert run.step("decline").status == "skipped"
        order.refresh_from_db()
        assert order.status == "confirmed"
        assert Product.objects.get(sku="MUG").stock == 3
        assert mail.outbox[0].to == ["ada@example.com"]

    def test_a_declined_card_puts_the_stock_back(self):
        order = self.place(card="tok_declined")

        run = run_flow(order_flow, {"order_id": order.pk})

        assert run.output == {"decline": {"released": 2}}
        assert run.step("send_confirmation").status == "skipped"
        order.refresh_from_db()
        assert order.status == "declined"
        assert Product.objects.get(sku="MUG").stock == 5

    def test_a_flaky_gateway_is_retried(self):
        order = self.place(card="tok_visa")

        with fail_next(order_flow, "charge_payment", times=2, error=ConnectionError("gateway timeout")):
            run = run_flow(order_flow, {"order_id": order.pk})

        assert run.status == "completed"
        assert run.task("charge_payment").attempts == 3

    def test_a_failed_order_is_retried_once_the_card_works(self):
        order = self.place(card="tok_busy")

        run = run_flow(order_flow, {"order_id": order.pk})

        assert run.status == "failed"
        assert run.task("charge_payment").errors[-1] == "payment gateway busy, retry in 5s"
        assert run.step("reserve_stock").status == "completed"
        assert Product.objects.get(sku="MUG").stock == 3
        Order.objects.filter(pk=order.pk).update(card="tok_visa")
        retry_run(run.run_id)
        drain(flows=[order_flow])

        assert load_run(run.run_id).status == "completed"
        assert Product.objects.get(sku="MUG").stock == 3
