"""Plans that stay good on the hot path: generic plans for the claim, completion and start functions,
and a classifying select planned once per session instead of on every call."""

from django.db import migrations

from pgflow_django.sql.runsql import RunSqlFile


class Migration(migrations.Migration):
    dependencies = [("pgflow", "0017_admin_console")]

    operations = [RunSqlFile("0018_hot_path.sql", "0018_hot_path_down.sql")]
