"""Flow control by key: concurrency keys and rate limits enforced by the claim in the database, with
deferred (not failed) over-limit tasks and a wake-up per freed slot.

The ``CreateModel`` operations only record the read-only models in Django's migration state."""

from django.db import migrations, models

from pgflow_django.sql.runsql import RunSqlFile


class Migration(migrations.Migration):
    dependencies = [("pgflow", "0020_priorities")]

    operations = [
        RunSqlFile("0021_concurrency_limits.sql", "0021_concurrency_limits_down.sql"),
        migrations.CreateModel(
            name="FlowLimit",
            fields=[
                (
                    "pk",
                    models.CompositePrimaryKey(
                        "flow_id",
                        "step_slug",
                        "kind",
                        blank=True,
                        editable=False,
                        primary_key=True,
                        serialize=False,
                    ),
                ),
                ("step_slug", models.TextField()),
                ("kind", models.TextField(choices=[("concurrency", "Concurrency"), ("rate", "Rate")])),
                (
                    "key_source",
                    models.TextField(
                        choices=[
                            ("none", "None"),
                            ("input", "an input field"),
                            ("stored", "computed where the run started"),
                        ]
                    ),
                ),
                ("key_field", models.TextField(null=True)),
                ("amount", models.IntegerField()),
                ("period", models.FloatField(null=True)),
                ("burst", models.IntegerField(null=True)),
            ],
            options={
                "db_table": 'pgflow"."flow_limits',
                "managed": False,
            },
        ),
        migrations.CreateModel(
            name="LimitHold",
            fields=[
                (
                    "pk",
                    models.CompositePrimaryKey(
                        "run_id",
                        "task_step_slug",
                        "task_index",
                        "step_slug",
                        blank=True,
                        editable=False,
                        primary_key=True,
                        serialize=False,
                    ),
                ),
                ("run_id", models.UUIDField()),
                ("task_step_slug", models.TextField()),
                ("task_index", models.IntegerField()),
                ("flow_slug", models.TextField()),
                ("step_slug", models.TextField()),
                ("key", models.TextField()),
                ("attempt", models.IntegerField()),
                ("held_at", models.DateTimeField()),
            ],
            options={
                "db_table": 'pgflow"."limit_holds',
                "managed": False,
            },
        ),
        migrations.CreateModel(
            name="LimitSlot",
            fields=[
                (
                    "pk",
                    models.CompositePrimaryKey(
                        "flow_id",
                        "step_slug",
                        "kind",
                        "key",
                        blank=True,
                        editable=False,
                        primary_key=True,
                        serialize=False,
                    ),
                ),
                ("step_slug", models.TextField()),
                ("kind", models.TextField(choices=[("concurrency", "Concurrency"), ("rate", "Rate")])),
                ("key", models.TextField()),
                ("tokens", models.FloatField()),
                ("refilled_at", models.DateTimeField()),
                ("granted_at", models.DateTimeField(null=True)),
            ],
            options={
                "db_table": 'pgflow"."limit_slots',
                "managed": False,
            },
        ),
        migrations.CreateModel(
            name="LimitWait",
            fields=[
                (
                    "pk",
                    models.CompositePrimaryKey(
                        "run_id",
                        "task_step_slug",
                        "task_index",
                        blank=True,
                        editable=False,
                        primary_key=True,
                        serialize=False,
                    ),
                ),
                ("run_id", models.UUIDField()),
                ("task_step_slug", models.TextField()),
                ("task_index", models.IntegerField()),
                ("flow_slug", models.TextField()),
                ("step_slug", models.TextField()),
                ("kind", models.TextField(choices=[("concurrency", "Concurrency"), ("rate", "Rate")])),
                ("key", models.TextField()),
                ("queue_name", models.TextField()),
                ("message_id", models.BigIntegerField()),
                ("deferrals", models.IntegerField()),
                ("deferred_at", models.DateTimeField()),
                ("visible_at", models.DateTimeField()),
                ("woken_at", models.DateTimeField(null=True)),
            ],
            options={
                "db_table": 'pgflow"."limit_waits',
                "managed": False,
            },
        ),
        migrations.CreateModel(
            name="RunLimitKey",
            fields=[
                (
                    "pk",
                    models.CompositePrimaryKey(
                        "run_id",
                        "step_slug",
                        "kind",
                        blank=True,
                        editable=False,
                        primary_key=True,
                        serialize=False,
                    ),
                ),
                ("step_slug", models.TextField()),
                ("kind", models.TextField(choices=[("concurrency", "Concurrency"), ("rate", "Rate")])),
                ("key", models.TextField()),
            ],
            options={
                "db_table": 'pgflow"."run_limit_keys',
                "managed": False,
            },
        ),
    ]
