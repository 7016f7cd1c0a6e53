"""A Django task of the ``second`` backend of ``tests/multidb_settings.py`` (its database: ``second``)."""

from testproject.example.task_api import task


@task(backend="second")
def add_second(a: int, b: int) -> int:
    return a + b
