"""Time-ordered (UUIDv7) run ids and the opt-in partitioned history (``pgflow_partition``): functions
only, nothing is partitioned by migrating."""

from django.db import migrations

from pgflow_django.sql.runsql import RunSqlFile


class Migration(migrations.Migration):
    dependencies = [("pgflow", "0018_hot_path")]

    operations = [RunSqlFile("0022_partitioned_history.sql", "0022_partitioned_history_down.sql")]
