"""The migrations 0007_task_backend to 0038_worker_support_queue as one, squashed before the first
release: their SQL is ``sql/migrations/0007_squashed_0038.sql`` (down: ``..._down.sql``, back to 0006),
written by ``python -m pgflow_django.sql.squash 0007 0038 0007_squashed_0038``, and their model state
operations follow in their order. A database that applied all of 0007 to 0038 has applied this one; one
stopped between them is refused by ``migrate`` with the fix (docs/upgrading.md)."""

from django.db import migrations, models

import pgflow_django.models
from pgflow_django.sql.runsql import RunSqlFile


class Migration(migrations.Migration):
    replaces = [
        ("pgflow", "0007_task_backend"),
        ("pgflow", "0008_fast_paths"),
        ("pgflow", "0009_shape_safety"),
        ("pgflow", "0010_pgflow_fidelity"),
        ("pgflow", "0011_lock_order"),
        ("pgflow", "0012_poison_paths"),
        ("pgflow", "0013_transition_times"),
        ("pgflow", "0014_schedules"),
        ("pgflow", "0015_consolidation"),
        ("pgflow", "0016_observability"),
        ("pgflow", "0017_admin_console"),
        ("pgflow", "0018_hot_path"),
        ("pgflow", "0019_hand_off"),
        ("pgflow", "0020_priorities"),
        ("pgflow", "0021_concurrency_limits"),
        ("pgflow", "0022_partitioned_history"),
        ("pgflow", "0023_one_home"),
        ("pgflow", "0024_batch_joins"),
        ("pgflow", "0025_batch_probes"),
        ("pgflow", "0026_completion_probe"),
        ("pgflow", "0027_key_only_probes"),
        ("pgflow", "0028_wake_after_claims"),
        ("pgflow", "0029_hot_path_without_jit"),
        ("pgflow", "0030_limit_wakeups"),
        ("pgflow", "0031_queue_access"),
        ("pgflow", "0032_archive_partitions"),
        ("pgflow", "0033_limit_wake_locked_messages"),
        ("pgflow", "0034_queue_provisioning"),
        ("pgflow", "0035_schedule_catch_up"),
        ("pgflow", "0036_return_unstarted_tasks"),
        ("pgflow", "0037_schedule_isolation"),
        ("pgflow", "0038_worker_support_queue"),
    ]

    dependencies = [("pgflow", "0006_shared_queues")]

    operations = [
        RunSqlFile("0007_squashed_0038.sql", "0007_squashed_0038_down.sql"),
        # 0007_task_backend
        migrations.AddField(model_name="run", name="not_before", field=models.DateTimeField(null=True)),
        migrations.AddField(
            model_name="steptask", name="attempt_errors", field=models.JSONField(default=list)
        ),
        # 0010_pgflow_fidelity
        migrations.AlterField(
            model_name="stepstate",
            name="status",
            field=models.TextField(
                choices=[
                    ("created", "Created"),
                    ("started", "Started"),
                    ("completed", "Completed"),
                    ("failed", "Failed"),
                    ("skipped", "Skipped"),
                    ("cancelled", "Cancelled"),
                ]
            ),
        ),
        # 0014_schedules
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
        # 0017_admin_console
        migrations.AddField(
            model_name="steptask", name="attempts_base", field=models.IntegerField(default=0)
        ),
        migrations.AlterModelOptions(
            name="flow",
            options={
                "managed": False,
                "permissions": [("pause_flow", "Can pause and resume a flow's workers")],
            },
        ),
        migrations.AlterModelOptions(
            name="run",
            options={
                "managed": False,
                "permissions": [
                    ("cancel_run", "Can cancel a started run"),
                    ("rerun_run", "Can start a new run of a finished run's flow and input"),
                    ("retry_run", "Can retry a failed run from where it failed"),
                ],
            },
        ),
        # 0021_concurrency_limits
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
        # 0022_partitioned_history
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
        # 0032_archive_partitions
        migrations.AddField(
            model_name="historypartitioning", name="archives", field=models.BooleanField(default=False)
        ),
        # 0038_worker_support_queue
        migrations.AddField(model_name="workersupport", name="queue_name", field=models.TextField(null=True)),
    ]
