"""The hot path probes a run by its id alone and checks its status afterwards, so no plan made on a
small partition reads a run through the (flow_slug, status) index."""

from django.db import migrations

from pgflow_django.sql.runsql import RunSqlFile


class Migration(migrations.Migration):
    dependencies = [("pgflow", "0026_completion_probe")]

    operations = [RunSqlFile("0027_key_only_probes.sql", "0027_key_only_probes_down.sql")]
