"""A freed concurrency slot wakes a waiter only with its message locked (``pgflow.lock_waiting_messages``):
a waiter whose message a read holds goes to the key's next waiter instead of being marked woken while
its message stays hidden."""

from django.db import migrations

from pgflow_django.sql.runsql import RunSqlFile


class Migration(migrations.Migration):
    dependencies = [("pgflow", "0032_archive_partitions")]

    operations = [
        RunSqlFile("0033_limit_wake_locked_messages.sql", "0033_limit_wake_locked_messages_down.sql")
    ]
