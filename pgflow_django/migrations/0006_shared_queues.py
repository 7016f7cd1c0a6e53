"""Explicit shared queues: routed flows, declared shared queues, claims with an exact support set."""

from django.db import migrations, models

from pgflow_django.sql.runsql import RunSqlFile


class Migration(migrations.Migration):
    dependencies = [("pgflow", "0005_step_queues")]

    operations = [
        RunSqlFile("0006_shared_queues.sql", "0006_shared_queues_down.sql"),
        migrations.AlterField(
            model_name="flow",
            name="queue_mode",
            field=models.TextField(
                choices=[
                    ("flow", "one queue for the flow"),
                    ("step", "a private queue per step"),
                    ("routed", "declared shared queues"),
                ],
                default="flow",
            ),
        ),
        migrations.CreateModel(
            name="SharedQueue",
            fields=[
                ("queue_name", models.TextField(primary_key=True, serialize=False)),
                ("declared_at", models.DateTimeField()),
            ],
            options={"db_table": 'pgflow"."shared_queues', "managed": False},
        ),
    ]
