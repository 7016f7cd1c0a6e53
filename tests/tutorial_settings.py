"""Settings of the tutorial's shop (docs/tutorial.md): the example project plus ``tests.tutorial_shop``,
whose ``flows.py`` is discovered as in any installed app, and its URLs. For ``manage.py`` runs of the
tutorial's app (``DJANGO_SETTINGS_MODULE=tests.tutorial_settings``)."""

from testproject.settings import *  # noqa: F403
from testproject.settings import INSTALLED_APPS as _APPS

INSTALLED_APPS = [*_APPS, "tests.tutorial_shop"]
ROOT_URLCONF = "tests.tutorial_urls"
EMAIL_BACKEND = "django.core.mail.backends.console.EmailBackend"
