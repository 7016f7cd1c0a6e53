"""pgflow.task_details and pgflow.task_transitions: what the worker's own statements read of the history,
planned under the hot path's settings (on a partitioned history those statements were JIT-compiled on
each execution)."""

from django.db import migrations

from pgflow_django.sql.runsql import RunSqlFile


class Migration(migrations.Migration):
    dependencies = [("pgflow", "0041_complete_hop")]

    operations = [RunSqlFile("0042_worker_reads.sql", "0042_worker_reads_down.sql")]
