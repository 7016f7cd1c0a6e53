"""A run records the trace context of the code that started it (OpenTelemetry, W3C traceparent)."""

from django.db import migrations

from pgflow_django.sql.runsql import RunSqlFile


class Migration(migrations.Migration):
    dependencies = [("pgflow", "0015_consolidation")]

    operations = [RunSqlFile("0016_observability.sql", "0016_observability_down.sql")]
