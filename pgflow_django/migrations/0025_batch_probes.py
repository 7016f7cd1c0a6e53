"""complete_tasks reaches each failing item's run, step and task by a per-item probe (a lateral
subquery), so a partitioned history is not walked partition by partition."""

from django.db import migrations

from pgflow_django.sql.runsql import RunSqlFile


class Migration(migrations.Migration):
    dependencies = [("pgflow", "0024_batch_joins")]

    operations = [RunSqlFile("0025_batch_probes.sql", "0025_batch_probes_down.sql")]
