"""Fewer row writes per task: no foreign keys from the run history to flows and steps (a trigger keeps
a flow or step with runs from being deleted or renamed), and a fillfactor on pgflow.runs."""

from django.db import migrations

from pgflow_django.sql.runsql import RunSqlFile


class Migration(migrations.Migration):
    dependencies = [("pgflow", "0007_squashed_0038")]

    operations = [RunSqlFile("0039_row_writes.sql", "0039_row_writes_down.sql")]
