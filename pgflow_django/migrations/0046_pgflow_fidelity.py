"""Closer to pgflow where its own tests hold it to a behaviour: pgflow's invariants on step_states and
step_tasks as CHECK constraints."""

from django.db import migrations

from pgflow_django.sql.runsql import RunSqlFile


class Migration(migrations.Migration):
    dependencies = [("pgflow", "0045_run_now")]

    operations = [RunSqlFile("0046_pgflow_fidelity.sql", "0046_pgflow_fidelity_down.sql")]
