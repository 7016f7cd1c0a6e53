"""The hot functions never compile their statements with JIT: on a partitioned history their generic
plans could cost past ``jit_above_cost`` and were compiled on every execution."""

from django.db import migrations

from pgflow_django.sql.runsql import RunSqlFile


class Migration(migrations.Migration):
    dependencies = [("pgflow", "0028_wake_after_claims")]

    operations = [RunSqlFile("0029_hot_path_without_jit.sql", "0029_hot_path_without_jit_down.sql")]
