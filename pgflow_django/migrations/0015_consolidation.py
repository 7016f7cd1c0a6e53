"""One home for each concept in the SQL: one visibility function with a mode, one classifying select
for both claims, no test-only functions, and every function's search_path pinned."""

from django.db import migrations

from pgflow_django.sql.runsql import RunSqlFile


class Migration(migrations.Migration):
    dependencies = [("pgflow", "0014_schedules")]

    operations = [RunSqlFile("0015_consolidation.sql", "0015_consolidation_down.sql")]
