"""Schedules: cron definitions with their planned ticks, the fired-ticks ledger, the firing functions.

The ``CreateModel`` operations only record the read-only models in Django's migration state."""

from django.db import migrations, models

import pgflow_django.models
from pgflow_django.sql.runsql import RunSqlFile


class Migration(migrations.Migration):
    dependencies = [("pgflow", "0013_transition_times")]

    operations = [
        RunSqlFile("0014_schedules.sql", "0014_schedules_down.sql"),
        migrations.CreateModel(
            name="Schedule",
            fields=[
                ("schedule_name", models.TextField(primary_key=True, serialize=False)),
                ("flow_slug", models.TextField()),
                ("cron", models.TextField()),
                ("timezone", models.TextField(default="UTC")),
                ("input", models.JSONField(default=dict)),
                ("input_callable", models.TextField(null=True)),
                (
                    "catch_up",
                    models.TextField(
                        choices=[("all", "All"), ("latest", "Latest"), ("none", "None")], default="latest"
                    ),
                ),
                ("max_catch_up", models.IntegerField(default=10)),
                ("jitter_seconds", models.IntegerField(default=0)),
                ("enabled", models.BooleanField(default=True)),
                (
                    "paused_reason",
                    models.TextField(
                        choices=[("operator", "Operator"), ("removed_from_code", "removed from code")],
                        null=True,
                    ),
                ),
                ("paused_detail", models.TextField(null=True)),
                ("paused_at", models.DateTimeField(null=True)),
                (
                    "origin",
                    models.TextField(
                        choices=[("code", "declared in code"), ("runtime", "created at run time")]
                    ),
                ),
                ("revision", models.BigIntegerField(default=1)),
                (
                    "upcoming",
                    pgflow_django.models.TimestampList(default=list),
                ),
                ("planned_until", models.DateTimeField(null=True)),
                ("next_fire_at", models.DateTimeField(null=True)),
                ("last_tick", models.DateTimeField(null=True)),
                ("last_fired_at", models.DateTimeField(null=True)),
                ("last_run_id", models.UUIDField(null=True)),
                ("missed_ticks", models.BigIntegerField(default=0)),
                ("last_error", models.TextField(null=True)),
                ("created_at", models.DateTimeField()),
                ("updated_at", models.DateTimeField()),
            ],
            options={"db_table": 'pgflow"."schedules', "managed": False},
        ),
        migrations.CreateModel(
            name="ScheduleTick",
            fields=[
                (
                    "pk",
                    models.CompositePrimaryKey(
                        "schedule_id", "tick", blank=True, editable=False, primary_key=True, serialize=False
                    ),
                ),
                (
                    "schedule",
                    models.ForeignKey(
                        db_column="schedule_name",
                        db_constraint=False,
                        db_index=False,
                        on_delete=models.deletion.DO_NOTHING,
                        related_name="ticks",
                        to="pgflow.schedule",
                    ),
                ),
                ("tick", models.DateTimeField()),
                ("run_id", models.UUIDField()),
                ("kind", models.TextField(choices=[("cron", "Cron"), ("manual", "Manual")], default="cron")),
                ("fired_at", models.DateTimeField()),
            ],
            options={"db_table": 'pgflow"."schedule_ticks', "managed": False},
        ),
    ]
