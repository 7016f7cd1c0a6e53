"""pgflow.retry_run with step_tasks.attempts_base, and the permissions of the admin's operator
actions: cancel, re-run and retry runs, pause and resume flows."""

from django.db import migrations, models

from pgflow_django.sql.runsql import RunSqlFile


class Migration(migrations.Migration):
    dependencies = [("pgflow", "0016_observability")]

    operations = [
        RunSqlFile("0017_admin_console.sql", "0017_admin_console_down.sql"),
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
    ]
