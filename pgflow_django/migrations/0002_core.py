"""Install pgflow's one-flow/one-queue core in schema ``pgflow`` (backward: drop the schema).

The ``CreateModel`` operations only record the read-only models in Django's migration state (they are
``managed = False``), so ``makemigrations`` stays quiet for projects that install this app.
"""

from django.db import migrations, models

from pgflow_django.sql.runsql import RunSqlFile


class Migration(migrations.Migration):
    dependencies = [("pgflow", "0001_pgmq")]

    operations = [
        RunSqlFile("0002_core.sql", "0002_core_down.sql"),
        migrations.CreateModel(
            name="Flow",
            fields=[
                ("flow_slug", models.TextField(primary_key=True, serialize=False)),
                ("opt_max_attempts", models.IntegerField()),
                ("opt_base_delay", models.IntegerField()),
                ("opt_timeout", models.IntegerField()),
                ("created_at", models.DateTimeField()),
            ],
            options={
                "db_table": 'pgflow"."flows',
                "managed": False,
            },
        ),
        migrations.CreateModel(
            name="Step",
            fields=[
                (
                    "pk",
                    models.CompositePrimaryKey(
                        "flow_id", "step_slug", blank=True, editable=False, primary_key=True, serialize=False
                    ),
                ),
                ("step_slug", models.TextField()),
                ("step_type", models.TextField(choices=[("single", "Single"), ("map", "Map")])),
                ("step_index", models.IntegerField()),
                ("deps_count", models.IntegerField()),
                ("opt_max_attempts", models.IntegerField(null=True)),
                ("opt_base_delay", models.IntegerField(null=True)),
                ("opt_timeout", models.IntegerField(null=True)),
                ("opt_start_delay", models.IntegerField(null=True)),
                ("required_input_pattern", models.JSONField(null=True)),
                ("forbidden_input_pattern", models.JSONField(null=True)),
                (
                    "when_unmet",
                    models.TextField(
                        choices=[("fail", "Fail"), ("skip", "Skip"), ("skip-cascade", "Skip Cascade")]
                    ),
                ),
                (
                    "when_exhausted",
                    models.TextField(
                        choices=[("fail", "Fail"), ("skip", "Skip"), ("skip-cascade", "Skip Cascade")]
                    ),
                ),
                ("created_at", models.DateTimeField()),
            ],
            options={
                "db_table": 'pgflow"."steps',
                "ordering": ["flow_id", "step_index"],
                "managed": False,
            },
        ),
        migrations.CreateModel(
            name="Dep",
            fields=[
                (
                    "pk",
                    models.CompositePrimaryKey(
                        "flow_id",
                        "dep_slug",
                        "step_slug",
                        blank=True,
                        editable=False,
                        primary_key=True,
                        serialize=False,
                    ),
                ),
                ("dep_slug", models.TextField()),
                ("step_slug", models.TextField()),
                ("created_at", models.DateTimeField()),
            ],
            options={
                "db_table": 'pgflow"."deps',
                "managed": False,
            },
        ),
        migrations.CreateModel(
            name="Worker",
            fields=[
                ("worker_id", models.UUIDField(primary_key=True, serialize=False)),
                ("queue_name", models.TextField()),
                ("function_name", models.TextField()),
                ("started_at", models.DateTimeField()),
                ("last_heartbeat_at", models.DateTimeField()),
                ("deprecated_at", models.DateTimeField(null=True)),
                ("stopped_at", models.DateTimeField(null=True)),
            ],
            options={
                "db_table": 'pgflow"."workers',
                "managed": False,
            },
        ),
        migrations.CreateModel(
            name="Run",
            fields=[
                ("run_id", models.UUIDField(primary_key=True, serialize=False)),
                (
                    "status",
                    models.TextField(
                        choices=[("started", "Started"), ("completed", "Completed"), ("failed", "Failed")]
                    ),
                ),
                ("input", models.JSONField()),
                ("output", models.JSONField(null=True)),
                ("error_message", models.TextField(null=True)),
                ("remaining_steps", models.IntegerField()),
                ("started_at", models.DateTimeField()),
                ("completed_at", models.DateTimeField(null=True)),
                ("failed_at", models.DateTimeField(null=True)),
            ],
            options={
                "db_table": 'pgflow"."runs',
                "managed": False,
            },
        ),
        migrations.CreateModel(
            name="StepState",
            fields=[
                (
                    "pk",
                    models.CompositePrimaryKey(
                        "run_id", "step_slug", blank=True, editable=False, primary_key=True, serialize=False
                    ),
                ),
                ("step_slug", models.TextField()),
                (
                    "status",
                    models.TextField(
                        choices=[
                            ("created", "Created"),
                            ("started", "Started"),
                            ("completed", "Completed"),
                            ("failed", "Failed"),
                            ("skipped", "Skipped"),
                        ]
                    ),
                ),
                ("remaining_tasks", models.IntegerField(null=True)),
                ("initial_tasks", models.IntegerField(null=True)),
                ("remaining_deps", models.IntegerField()),
                ("output", models.JSONField(null=True)),
                ("error_message", models.TextField(null=True)),
                (
                    "skip_reason",
                    models.TextField(
                        choices=[
                            ("condition_unmet", "Condition Unmet"),
                            ("handler_failed", "Handler Failed"),
                            ("dependency_skipped", "Dependency Skipped"),
                        ],
                        null=True,
                    ),
                ),
                ("created_at", models.DateTimeField()),
                ("started_at", models.DateTimeField(null=True)),
                ("completed_at", models.DateTimeField(null=True)),
                ("failed_at", models.DateTimeField(null=True)),
                ("skipped_at", models.DateTimeField(null=True)),
            ],
            options={
                "db_table": 'pgflow"."step_states',
                "managed": False,
            },
        ),
        migrations.CreateModel(
            name="StepTask",
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
                ("step_slug", models.TextField()),
                ("task_index", models.IntegerField()),
                ("message_id", models.BigIntegerField(null=True)),
                (
                    "status",
                    models.TextField(
                        choices=[
                            ("queued", "Queued"),
                            ("started", "Started"),
                            ("completed", "Completed"),
                            ("failed", "Failed"),
                            ("skipped", "Skipped"),
                            ("cancelled", "Cancelled"),
                        ]
                    ),
                ),
                ("attempts_count", models.IntegerField()),
                ("error_message", models.TextField(null=True)),
                ("output", models.JSONField(null=True)),
                ("last_worker_id", models.UUIDField(null=True)),
                ("requeued_count", models.IntegerField()),
                ("last_requeued_at", models.DateTimeField(null=True)),
                ("permanently_stalled_at", models.DateTimeField(null=True)),
                ("queued_at", models.DateTimeField()),
                ("started_at", models.DateTimeField(null=True)),
                ("completed_at", models.DateTimeField(null=True)),
                ("failed_at", models.DateTimeField(null=True)),
            ],
            options={
                "db_table": 'pgflow"."step_tasks',
                "managed": False,
            },
        ),
    ]
