"""Poison paths: a task that no retry can fix fails at once (pgflow.reject_task)."""

from django.db import migrations

from pgflow_django.sql.runsql import RunSqlFile


class Migration(migrations.Migration):
    dependencies = [("pgflow", "0011_lock_order")]

    operations = [RunSqlFile("0012_poison_paths.sql", "0012_poison_paths_down.sql")]
