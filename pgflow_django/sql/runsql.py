"""A ``RunSQL`` that loads one frozen delta from ``pgflow_django/sql/migrations``."""

from __future__ import annotations

from typing import Any

from django.db import migrations

from pgflow_django.sql import migration_sql


class RunSqlFile(migrations.RunSQL):
    def __init__(self, forward: str, backward: str | None = None, **kwargs: Any) -> None:
        super().__init__(
            sql=migration_sql(forward),
            reverse_sql=migration_sql(backward) if backward else migrations.RunSQL.noop,
            **kwargs,
        )
