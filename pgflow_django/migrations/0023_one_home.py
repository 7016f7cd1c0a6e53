"""One fence for a failed attempt: fail_task and reject_task both lock and check the claim through
pgflow.lock_claimed_task."""

from django.db import migrations

from pgflow_django.sql.runsql import RunSqlFile


class Migration(migrations.Migration):
    dependencies = [("pgflow", "0022_partitioned_history")]

    operations = [RunSqlFile("0023_one_home.sql", "0023_one_home_down.sql")]
