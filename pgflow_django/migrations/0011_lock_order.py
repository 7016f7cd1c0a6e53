"""One lock order for every writer; deletions exclude starts; archiving tolerates reused message ids."""

from django.db import migrations

from pgflow_django.sql.runsql import RunSqlFile


class Migration(migrations.Migration):
    dependencies = [("pgflow", "0010_pgflow_fidelity")]

    operations = [RunSqlFile("0011_lock_order.sql", "0011_lock_order_down.sql")]
