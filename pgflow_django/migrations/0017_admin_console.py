"""Permissions of the admin's operator actions: cancel and re-run runs, pause and resume flows."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("pgflow", "0013_transition_times")]

    operations = [
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
                ],
            },
        ),
    ]
