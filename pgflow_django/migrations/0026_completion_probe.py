"""complete_tasks updates the completed step states from its batch alone, so no plan walks a step's
states (PostgreSQL 18 did, on a partitioned history)."""

from django.db import migrations

from pgflow_django.sql.runsql import RunSqlFile


class Migration(migrations.Migration):
    dependencies = [("pgflow", "0025_batch_probes")]

    operations = [RunSqlFile("0026_completion_probe.sql", "0026_completion_probe_down.sql")]
