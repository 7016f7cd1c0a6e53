"""Flow control by key: concurrency keys and rate limits enforced by the claim in the database, with
deferred (not failed) over-limit tasks and a wake-up per freed slot."""

from django.db import migrations

from pgflow_django.sql.runsql import RunSqlFile


class Migration(migrations.Migration):
    dependencies = [("pgflow", "0018_hot_path")]

    operations = [RunSqlFile("0021_concurrency_limits.sql", "0021_concurrency_limits_down.sql")]
