"""Cancel a started run and re-run a finished one through the SQL API (used by the admin actions)."""

from django.db import migrations

from pgflow_django.sql.runsql import RunSqlFile


class Migration(migrations.Migration):
    dependencies = [("pgflow", "0003_queue_identity")]

    operations = [RunSqlFile("0004_run_control.sql", "0004_run_control_down.sql")]
