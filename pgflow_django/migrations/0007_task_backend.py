"""Delayed runs (runs.not_before, start_flow's start_delay) and per-attempt errors, for django.tasks."""

from django.db import migrations, models

from pgflow_django.sql.runsql import RunSqlFile


class Migration(migrations.Migration):
    dependencies = [("pgflow", "0006_shared_queues")]

    operations = [
        RunSqlFile("0007_task_backend.sql", "0007_task_backend_down.sql"),
        migrations.AddField(model_name="run", name="not_before", field=models.DateTimeField(null=True)),
        migrations.AddField(
            model_name="steptask", name="attempt_errors", field=models.JSONField(default=list)
        ),
    ]
