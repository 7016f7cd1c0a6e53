"""A worker gives back the claims no handler thread took in time (``pgflow.return_unstarted_tasks``):
queued again with their attempts returned, visible to every worker at once."""

from django.db import migrations

from pgflow_django.sql.runsql import RunSqlFile


class Migration(migrations.Migration):
    dependencies = [("pgflow", "0035_schedule_catch_up")]

    operations = [RunSqlFile("0036_return_unstarted_tasks.sql", "0036_return_unstarted_tasks_down.sql")]
