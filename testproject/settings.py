"""Settings of the example project: DATABASE_URL when set, else the embedded PostgreSQL 18."""

from __future__ import annotations

import os
from pathlib import Path

import dj_database_url

from testproject.embedded import database_url

BASE_DIR = Path(__file__).resolve().parent
REPO_DIR = BASE_DIR.parent

SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "example-project-not-secret")
DEBUG = os.environ.get("DJANGO_DEBUG", "1") == "1"
ALLOWED_HOSTS = ["*"]
USE_TZ = True
TIME_ZONE = "UTC"
ROOT_URLCONF = "testproject.urls"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
STATIC_URL = "/static/"

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "pgactivity",
    "pglock",
    "pgmigrate",
    "pgflow_django",
    "testproject.example",
    "django_extensions",  # development tools: shell_plus, graph_models pgflow_django
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]

_url = os.environ.get("DATABASE_URL") or database_url(REPO_DIR / ".pgdata")
DATABASES = {"default": dj_database_url.parse(_url, conn_max_age=0)}
# libpq's socket form (postgresql://user@/db?host=/socket/dir, as the embedded server gives it): the
# socket directory belongs in HOST, where Django and the test helpers look for it.
if "host" in DATABASES["default"].get("OPTIONS", {}):
    DATABASES["default"]["HOST"] = DATABASES["default"]["OPTIONS"].pop("host")

PGMIGRATE_LOCK_TIMEOUT = 10

TASKS = {
    "default": {
        "BACKEND": "pgflow_django.tasks.PgflowTaskBackend",
        "QUEUES": ["default", "mail"],
        "OPTIONS": {"MAX_ATTEMPTS": 1, "TIMEOUT": 30},
    }
}

PGFLOW = {
    "FLOWS": ["testproject.example.demo_flows"],
    "ON_SHAPE_CHANGE": os.environ.get("PGFLOW_ON_SHAPE_CHANGE", "version"),
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "loggers": {
        "pgflow_django": {"handlers": ["console"], "level": os.environ.get("PGFLOW_LOG_LEVEL", "INFO")},
    },
}
