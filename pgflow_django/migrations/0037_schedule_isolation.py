"""One schedule that cannot be planned is skipped alone, its reason recorded in
``pgflow.schedules.plan_error``: ``pgflow.plan_schedules`` records failures beside the plans."""

from django.db import migrations

from pgflow_django.sql.runsql import RunSqlFile


class Migration(migrations.Migration):
    dependencies = [("pgflow", "0036_return_unstarted_tasks")]

    operations = [RunSqlFile("0037_schedule_isolation.sql", "0037_schedule_isolation_down.sql")]
