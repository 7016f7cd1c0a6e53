from django.apps import AppConfig


class ShopConfig(AppConfig):
    name = "tests.tutorial_shop"
    label = "shop"
    default_auto_field = "django.db.models.BigAutoField"
