"""A rate limit's bucket is refilled from the time its claim decides (read once the claim holds its
keys' rows), and its refill time never moves back: a claim that waited for a key's row no longer
counts the same interval twice."""

from django.db import migrations

from pgflow_django.sql.runsql import RunSqlFile


class Migration(migrations.Migration):
    dependencies = [("pgflow", "0039_row_writes")]

    operations = [RunSqlFile("0040_rate_refill.sql", "0040_rate_refill_down.sql")]
