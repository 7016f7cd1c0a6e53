"""Schedules: cron definitions with their planned ticks, the fired-ticks ledger, the firing functions."""

from django.db import migrations

from pgflow_django.sql.runsql import RunSqlFile


class Migration(migrations.Migration):
    dependencies = [("pgflow", "0013_transition_times")]

    operations = [RunSqlFile("0014_schedules.sql", "0014_schedules_down.sql")]
