"""Queue provisioning stays linear in the number of queues: ``pgflow.write_queue_access()`` checks every
queue's tables with one lookup by key, and beyond 32 queues the static branches of
``pgflow.queue_access`` live in 256 numbered functions chosen by a hash of the queue name, so a new
session compiles only what it uses and a new or dropped queue rewrites only its own function."""

from django.db import migrations

from pgflow_django.sql.runsql import RunSqlFile


class Migration(migrations.Migration):
    dependencies = [("pgflow", "0033_limit_wake_locked_messages")]

    operations = [RunSqlFile("0034_queue_provisioning.sql", "0034_queue_provisioning_down.sql")]
