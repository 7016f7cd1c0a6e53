"""Direct hand-off: a worker's completion claims the tasks it made ready on that worker's queue."""

from django.db import migrations

from pgflow_django.sql.runsql import RunSqlFile


class Migration(migrations.Migration):
    dependencies = [("pgflow", "0018_hot_path")]

    operations = [RunSqlFile("0019_hand_off.sql", "0019_hand_off_down.sql")]
