"""Validates the CHECK constraints 0046 added NOT VALID, in a transaction of its own so that workers
keep writing while the tables are read."""

from django.db import migrations

from pgflow_django.sql.runsql import RunSqlFile


class Migration(migrations.Migration):
    dependencies = [("pgflow", "0046_pgflow_fidelity")]

    operations = [RunSqlFile("0047_validate_fidelity_checks.sql", "0047_validate_fidelity_checks_down.sql")]
