"""Persist physical queue identity (steps and tasks carry their queue), behind the upgrade preflight.

The preflight runs first, in the same transaction: it takes the documented migration lock and the
table locks, audits the data (pgflow_audit runs the same checks) and aborts with one report when the
upgrade would be unsafe, leaving the database unchanged.
"""

from typing import Any

from django.db import migrations, models

from pgflow_django.sql.runsql import RunSqlFile


def preflight(apps: Any, schema_editor: Any) -> None:
    from pgflow_django.db.upgrade import preflight as run_preflight

    with schema_editor.connection.cursor() as cursor:
        run_preflight(cursor)


class Migration(migrations.Migration):
    dependencies = [("pgflow", "0002_core")]

    operations = [
        migrations.RunPython(preflight, migrations.RunPython.noop, elidable=False),
        RunSqlFile("0003_queue_identity.sql", "0003_queue_identity_down.sql"),
        migrations.CreateModel(
            name="WorkerPause",
            fields=[
                (
                    "pk",
                    models.CompositePrimaryKey(
                        "flow_slug",
                        "step_slug",
                        blank=True,
                        editable=False,
                        primary_key=True,
                        serialize=False,
                    ),
                ),
                ("flow_slug", models.TextField()),
                ("step_slug", models.TextField()),
                ("queue_name", models.TextField()),
                ("reason", models.TextField(choices=[("fatal", "Fatal"), ("operator", "Operator")])),
                ("detail", models.TextField(null=True)),
                ("paused_at", models.DateTimeField()),
            ],
            options={"db_table": 'pgflow"."worker_pauses', "managed": False},
        ),
    ]
