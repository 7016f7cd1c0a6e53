"""Django admin for pgflow (``admin.autodiscover`` imports this package): the model pages
(``pages``), the dashboard (``dashboard``), schedules (``schedules``), and their shared cells, database
choice and permissions (``lists``, ``database``, ``permissions``)."""

from pgflow_django.admin import pages as pages
