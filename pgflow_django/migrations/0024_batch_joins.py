"""Batch statements read one table by their batch and every other history table by a probe per row,
so the plans a session makes on fresh tables stay index probes as the history grows."""

from django.db import migrations

from pgflow_django.sql.runsql import RunSqlFile


class Migration(migrations.Migration):
    dependencies = [("pgflow", "0023_one_home")]

    operations = [RunSqlFile("0024_batch_joins.sql", "0024_batch_joins_down.sql")]
