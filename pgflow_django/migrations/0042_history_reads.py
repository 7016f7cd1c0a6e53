"""What the worker's statements and the start, claim and completion paths read of the history, made
cheap on a partitioned history: pgflow.task_details and pgflow.task_transitions (the worker's own
statements were JIT-compiled on each execution there), and reads bounded by the batch's run ids so that
generic plans prune partitions when they start."""

from django.db import migrations

from pgflow_django.sql.runsql import RunSqlFile


class Migration(migrations.Migration):
    dependencies = [("pgflow", "0041_complete_hop")]

    operations = [RunSqlFile("0042_history_reads.sql", "0042_history_reads_down.sql")]
