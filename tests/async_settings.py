"""Settings of the ASGI server that serves ``tests/async_views.py`` (test_async_client_asgi.py)."""

from testproject.settings import *  # noqa: F403
from testproject.settings import MIDDLEWARE

ROOT_URLCONF = "tests.async_views"
PGFLOW = {"FLOWS": ["tests.async_views.quote"]}
MIDDLEWARE = [name for name in MIDDLEWARE if name != "django.middleware.csrf.CsrfViewMiddleware"]
"""The test posts as an API client would, without a form's CSRF token."""
