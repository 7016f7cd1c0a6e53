"""Schedules: cron definitions with their planned ticks, the fired-ticks ledger, the firing functions.

The ``CreateModel`` operations only record the read-only models in Django's migration state.
"""

from django.contrib.postgres.fields import ArrayField
from django.db import migrations, models

from pgflow_django.sql.runsql import RunSqlFile

_WHEN = models.DateTimeField


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
                        choices=[("all", "all"), ("latest", "latest"), ("none", "none")], default="latest"
                    ),
                ),
                ("max_catch_up", models.IntegerField(default=10)),
                ("jitter_seconds", models.IntegerField(default=0)),
                ("enabled", models.BooleanField(default=True)),
                (
                    "paused_reason",
                    models.TextField(
                        choices=[("operator", "operator"), ("removed_from_code", "removed from code")],
                        null=True,
                    ),
                ),
                ("paused_detail", models.TextField(null=True)),
                ("paused_at", _WHEN(null=True)),
                ("origin", models.TextField(choices=[("code", "code"), ("runtime", "runtime")])),
                ("revision", models.BigIntegerField(default=1)),
                ("upcoming", ArrayField(base_field=_WHEN(), default=list, size=None)),
                ("planned_until", _WHEN(null=True)),
                ("next_fire_at", _WHEN(null=True)),
                ("last_tick", _WHEN(null=True)),
                ("last_fired_at", _WHEN(null=True)),
                ("last_run_id", models.UUIDField(null=True)),
                ("missed_ticks", models.BigIntegerField(default=0)),
                ("last_error", models.TextField(null=True)),
                ("created_at", _WHEN()),
                ("updated_at", _WHEN()),
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
                ("tick", _WHEN()),
                ("run_id", models.UUIDField()),
                ("kind", models.TextField(choices=[("cron", "cron"), ("manual", "manual")], default="cron")),
                ("fired_at", _WHEN()),
            ],
            options={"db_table": 'pgflow"."schedule_ticks', "managed": False},
        ),
    ]
