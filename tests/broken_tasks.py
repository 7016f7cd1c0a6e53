"""A task module that raises while it is imported (tests/broken_tasks_settings.py lists it)."""

raise RuntimeError("the payments client needs PAYMENTS_URL")
