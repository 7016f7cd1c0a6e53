"""The tasks framework of this Django version: django.tasks (Django 6), else the django_tasks backport."""

from __future__ import annotations

try:
    from django.tasks import task
except ImportError:
    from django_tasks import task

__all__ = ["task"]
