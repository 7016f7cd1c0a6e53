"""A completion's hand-off takes no concurrency key row, even for a flow that got its first limits
while the hand-off ran: limit_claim leaves those tasks for a read."""

from django.db import migrations

from pgflow_django.sql.runsql import RunSqlFile


class Migration(migrations.Migration):
    dependencies = [("pgflow", "0029_hot_path_without_jit")]

    operations = [
        RunSqlFile("0030_hand_off_leaves_new_limits.sql", "0030_hand_off_leaves_new_limits_down.sql")
    ]
