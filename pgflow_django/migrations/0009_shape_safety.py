"""Shape-change safety: no replacement unless asked; a generation per compilation, which claims compare."""

from django.db import migrations

from pgflow_django.sql.runsql import RunSqlFile


class Migration(migrations.Migration):
    dependencies = [("pgflow", "0008_fast_paths")]

    operations = [RunSqlFile("0009_shape_safety.sql", "0009_shape_safety_down.sql")]
