"""Flow control's wake-ups: a completion's hand-off takes no concurrency key row, even for a flow that
got its first limits while it ran, and stalled recovery's sweep wakes the waiters of keys with
unused slots."""

from django.db import migrations

from pgflow_django.sql.runsql import RunSqlFile


class Migration(migrations.Migration):
    dependencies = [("pgflow", "0029_hot_path_without_jit")]

    operations = [RunSqlFile("0030_limit_wakeups.sql", "0030_limit_wakeups_down.sql")]
