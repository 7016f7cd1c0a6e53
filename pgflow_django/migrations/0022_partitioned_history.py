"""Time-ordered (UUIDv7) run ids and the opt-in partitioned history (``pgflow_partition``): functions
only, nothing is partitioned by migrating. The model operations only record the read-only models in
Django's migration state."""

from django.db import migrations, models

from pgflow_django.sql.runsql import RunSqlFile


class Migration(migrations.Migration):
    dependencies = [("pgflow", "0021_concurrency_limits")]

    operations = [
        RunSqlFile("0022_partitioned_history.sql", "0022_partitioned_history_down.sql"),
        migrations.AddIndex(
            model_name="run",
            index=models.Index(
                condition=models.Q(rerun_of__isnull=False), fields=["rerun_of"], name="runs_rerun_of_idx"
            ),
        ),
        migrations.CreateModel(
            name="HistoryPartitioning",
            fields=[
                ("singleton", models.BooleanField(primary_key=True, serialize=False)),
                ("partition_interval", models.DurationField()),
                ("ahead", models.IntegerField()),
                ("partitioned_at", models.DateTimeField()),
            ],
            options={"db_table": 'pgflow"."history_partitioning', "managed": False},
        ),
    ]
