"""The hot path reaches pgflow's queues by static SQL: ``pgflow.queue_access``, written by
``pgflow.write_queue_access()`` with a branch for each queue whose tables have PGMQ's layout."""

from django.db import migrations

from pgflow_django.sql.runsql import RunSqlFile


class Migration(migrations.Migration):
    dependencies = [("pgflow", "0030_limit_wakeups")]

    operations = [RunSqlFile("0031_queue_access.sql", "0031_queue_access_down.sql")]
