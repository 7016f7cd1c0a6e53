"""Private per-step queues: a flow's queue mode and generated route, step selectors, worker support sets."""

from django.db import migrations, models

from pgflow_django.sql.runsql import RunSqlFile


class Migration(migrations.Migration):
    dependencies = [("pgflow", "0004_run_control")]

    operations = [
        RunSqlFile("0005_step_queues.sql", "0005_step_queues_down.sql"),
        migrations.AddField(
            model_name="flow",
            name="queue_mode",
            field=models.TextField(
                choices=[("flow", "one queue for the flow"), ("step", "a private queue per step")],
                default="flow",
            ),
        ),
        migrations.CreateModel(
            name="WorkerSupport",
            fields=[
                (
                    "pk",
                    models.CompositePrimaryKey(
                        "worker_id",
                        "flow_slug",
                        "step_slug",
                        blank=True,
                        editable=False,
                        primary_key=True,
                        serialize=False,
                    ),
                ),
                (
                    "worker",
                    models.ForeignKey(
                        db_column="worker_id",
                        db_constraint=False,
                        db_index=False,
                        on_delete=models.deletion.DO_NOTHING,
                        related_name="supports",
                        to="pgflow.worker",
                    ),
                ),
                ("flow_slug", models.TextField()),
                ("step_slug", models.TextField()),
            ],
            options={
                "db_table": 'pgflow"."worker_support',
                "managed": False,
                "indexes": [models.Index(fields=["flow_slug", "step_slug"], name="worker_support_step_idx")],
            },
        ),
    ]
