"""State timestamps record when each transition happened (clock_timestamp()), not its transaction start."""

from django.db import migrations

from pgflow_django.sql.runsql import RunSqlFile


class Migration(migrations.Migration):
    dependencies = [("pgflow", "0012_poison_paths")]

    operations = [RunSqlFile("0013_transition_times.sql", "0013_transition_times_down.sql")]
