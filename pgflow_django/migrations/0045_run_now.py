"""Run a delayed run's waiting work now: pgflow.run_now, and the permission of the admin's action."""

from django.db import migrations

from pgflow_django.sql.runsql import RunSqlFile


class Migration(migrations.Migration):
    dependencies = [("pgflow", "0044_flow_versions")]

    operations = [
        RunSqlFile("0045_run_now.sql", "0045_run_now_down.sql"),
        migrations.AlterModelOptions(
            name="run",
            options={
                "managed": False,
                "permissions": [
                    ("cancel_run", "Can cancel a started run"),
                    ("rerun_run", "Can start a new run of a finished run's flow and input"),
                    ("retry_run", "Can retry a failed run from where it failed"),
                    ("run_now", "Can run a delayed run's waiting work now"),
                ],
            },
        ),
    ]
