"""Cheaper claims and completions: no second visibility write, no cascade where no step finished."""

from django.db import migrations

from pgflow_django.sql.runsql import RunSqlFile


class Migration(migrations.Migration):
    dependencies = [("pgflow", "0007_task_backend")]

    operations = [RunSqlFile("0008_fast_paths.sql", "0008_fast_paths_down.sql")]
