"""A release of concurrency slots waits for the claims deciding its keys, so the tasks they deferred
are woken; the completion's hand-off leaves tasks under flow control to a read."""

from django.db import migrations

from pgflow_django.sql.runsql import RunSqlFile


class Migration(migrations.Migration):
    dependencies = [("pgflow", "0027_key_only_probes")]

    operations = [RunSqlFile("0028_wake_after_claims.sql", "0028_wake_after_claims_down.sql")]
