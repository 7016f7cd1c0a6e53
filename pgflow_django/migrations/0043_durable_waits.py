"""Steps that wait without a worker: event steps completed by pgflow.send_event (or failed by their
timeout), sleep steps completed at a time and subflow steps completed by their child runs, with the
tables that hold what waits now and the events kept for waits that start later."""

from django.db import migrations, models

from pgflow_django.sql.runsql import RunSqlFile

STEP_KINDS = [
    ("handler", "runs a handler"),
    ("event", "waits for an event"),
    ("sleep", "sleeps until a time"),
    ("subflow", "runs a child flow"),
]


class Migration(migrations.Migration):
    dependencies = [("pgflow", "0042_history_reads")]

    operations = [
        RunSqlFile("0043_durable_waits.sql", "0043_durable_waits_down.sql"),
        migrations.AddField(
            model_name="step",
            name="step_kind",
            field=models.TextField(choices=STEP_KINDS, default="handler"),
        ),
        migrations.AddField(model_name="step", name="wait_event", field=models.TextField(null=True)),
        migrations.AddField(model_name="step", name="wait_key", field=models.TextField(null=True)),
        migrations.AddField(model_name="step", name="wait_seconds", field=models.IntegerField(null=True)),
        migrations.AddField(model_name="step", name="sleep_until", field=models.TextField(null=True)),
        migrations.AddField(model_name="step", name="subflow_slug", field=models.TextField(null=True)),
        migrations.AddField(model_name="run", name="parent_run_id", field=models.UUIDField(null=True)),
        migrations.AddField(model_name="run", name="parent_step_slug", field=models.TextField(null=True)),
        migrations.AddField(model_name="run", name="parent_task_index", field=models.IntegerField(null=True)),
        migrations.CreateModel(
            name="Event",
            fields=[
                ("event_seq", models.BigIntegerField(primary_key=True, serialize=False)),
                ("event_name", models.TextField()),
                ("run_id", models.UUIDField(null=True)),
                ("event_key", models.TextField(null=True)),
                ("payload", models.JSONField()),
                ("event_id", models.TextField(null=True)),
                ("sent_at", models.DateTimeField()),
                ("expires_at", models.DateTimeField()),
            ],
            options={"db_table": 'pgflow"."events', "managed": False},
        ),
        migrations.CreateModel(
            name="StepWait",
            fields=[
                (
                    "pk",
                    models.CompositePrimaryKey(
                        "run_id",
                        "step_slug",
                        "task_index",
                        blank=True,
                        editable=False,
                        primary_key=True,
                        serialize=False,
                    ),
                ),
                (
                    "run",
                    models.ForeignKey(
                        db_column="run_id",
                        db_constraint=False,
                        db_index=False,
                        on_delete=models.deletion.DO_NOTHING,
                        related_name="step_waits",
                        to="pgflow.run",
                    ),
                ),
                ("step_slug", models.TextField()),
                ("task_index", models.IntegerField(default=0)),
                (
                    "flow",
                    models.ForeignKey(
                        db_column="flow_slug",
                        db_constraint=False,
                        db_index=False,
                        on_delete=models.deletion.DO_NOTHING,
                        related_name="step_waits",
                        to="pgflow.flow",
                    ),
                ),
                ("attempt", models.IntegerField()),
                (
                    "kind",
                    models.TextField(
                        choices=[("event", "Event"), ("sleep", "Sleep"), ("subflow", "Subflow")]
                    ),
                ),
                ("event_name", models.TextField(null=True)),
                ("event_key", models.TextField(null=True)),
                ("due_at", models.DateTimeField(null=True)),
                ("since", models.DateTimeField()),
                ("event_seq", models.BigIntegerField(null=True)),
                ("error_message", models.TextField(null=True)),
                ("child_run_id", models.UUIDField(null=True)),
            ],
            options={"db_table": 'pgflow"."step_waits', "managed": False},
        ),
    ]
