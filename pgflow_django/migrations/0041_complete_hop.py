"""A completion of the common case takes a fast path (pgflow.complete_hop) that completes the tasks,
starts their dependents and hands the new tasks to the worker in a handful of static statements."""

from django.db import migrations

from pgflow_django.sql.runsql import RunSqlFile


class Migration(migrations.Migration):
    dependencies = [("pgflow", "0040_rate_refill")]

    operations = [RunSqlFile("0041_complete_hop.sql", "0041_complete_hop_down.sql")]
