"""The example project's URLs plus the tutorial shop's (``tests/tutorial_settings.py``)."""

from django.urls import include, path

from testproject.urls import urlpatterns as example_urls

urlpatterns = [*example_urls, path("shop/", include("tests.tutorial_shop.urls"))]
