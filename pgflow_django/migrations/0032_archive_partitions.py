"""The PGMQ archives of pgflow's queues can be partitioned by archived_at on the history's intervals,
so that retention drops whole partitions of archived messages (``pgflow_partition --archives``)."""

from django.db import migrations, models

from pgflow_django.sql.runsql import RunSqlFile


class Migration(migrations.Migration):
    dependencies = [("pgflow", "0031_queue_access")]

    operations = [
        RunSqlFile("0032_archive_partitions.sql", "0032_archive_partitions_down.sql"),
        migrations.AddField(
            model_name="historypartitioning", name="archives", field=models.BooleanField(default=False)
        ),
    ]
