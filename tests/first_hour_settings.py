"""Settings variants of a new project, chosen through the environment for real ``manage.py`` runs.

- no ``LOGGING`` (as ``startproject`` makes it) unless ``FIRST_HOUR_LOGGING=1`` keeps the example
  project's (which routes the ``pgflow_django`` logger itself);
- ``FIRST_HOUR_APPS``: which of django-pgmigrate's apps to install, comma-separated (default all
  three: ``pgactivity,pglock,pgmigrate``; empty for none);
- ``FIRST_HOUR_SQLITE``: a file path, to put ``default`` on SQLite;
- ``FIRST_HOUR_LOCK_TIMEOUT``: ``PGMIGRATE_LOCK_TIMEOUT`` as a string (a mistake the checks name);
- ``FIRST_HOUR_WITHOUT_PGFLOW=1``: ``pgflow_django`` left out of ``INSTALLED_APPS`` (its package and
  the tasks backend still importable, as in a project that forgot the app).
- ``FIRST_HOUR_WITHOUT_ADMIN=1``: ``django.contrib.admin`` left out, as in a project without the admin.
"""

import os

from testproject.settings import *  # noqa: F403
from testproject.settings import INSTALLED_APPS as _APPS

_PGMIGRATE_APPS = ("pgactivity", "pglock", "pgmigrate")
_kept = [name for name in os.environ.get("FIRST_HOUR_APPS", ",".join(_PGMIGRATE_APPS)).split(",") if name]
INSTALLED_APPS = [app for app in _APPS if app not in _PGMIGRATE_APPS or app in _kept]
if os.environ.get("FIRST_HOUR_WITHOUT_PGFLOW") == "1":
    INSTALLED_APPS.remove("pgflow_django")
if os.environ.get("FIRST_HOUR_WITHOUT_ADMIN") == "1":
    INSTALLED_APPS.remove("django.contrib.admin")

if os.environ.get("FIRST_HOUR_LOGGING") != "1":
    del LOGGING  # noqa: F821

if os.environ.get("FIRST_HOUR_SQLITE"):
    DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": os.environ["FIRST_HOUR_SQLITE"]}}

if os.environ.get("FIRST_HOUR_LOCK_TIMEOUT"):
    PGMIGRATE_LOCK_TIMEOUT = os.environ["FIRST_HOUR_LOCK_TIMEOUT"]
