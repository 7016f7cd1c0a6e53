"""Claim priorities: a run's priority and flow/step defaults, sent in message headers and read in
priority order through an index on every queue table."""

from django.db import migrations

from pgflow_django.sql.runsql import RunSqlFile


class Migration(migrations.Migration):
    dependencies = [("pgflow", "0019_hand_off")]

    operations = [RunSqlFile("0020_priorities.sql", "0020_priorities_down.sql")]
