from django.db import models


class Product(models.Model):
    sku = models.CharField(max_length=32, unique=True)
    price_cents = models.PositiveIntegerField()
    stock = models.PositiveIntegerField(default=0)


class Order(models.Model):
    email = models.EmailField()
    card = models.CharField(max_length=64)  # a token from your payment provider's form
    status = models.CharField(max_length=20, default="new")  # new, confirmed, declined
    payment_id = models.CharField(max_length=64, blank=True)
    run_id = models.UUIDField(null=True)  # the pgflow run that handles the order


class OrderLine(models.Model):
    order = models.ForeignKey(Order, related_name="lines", on_delete=models.CASCADE)
    product = models.ForeignKey(Product, on_delete=models.PROTECT)
    quantity = models.PositiveIntegerField()
