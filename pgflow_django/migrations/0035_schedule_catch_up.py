"""A schedule whose planned ticks are all in the past is not due until it is planned again from now,
so its catch-up policy applies to the ticks due now, not to the stale end of the old plan."""

from django.db import migrations

from pgflow_django.sql.runsql import RunSqlFile


class Migration(migrations.Migration):
    dependencies = [("pgflow", "0034_queue_provisioning")]

    operations = [RunSqlFile("0035_schedule_catch_up.sql", "0035_schedule_catch_up_down.sql")]
