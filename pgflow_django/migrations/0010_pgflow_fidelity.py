"""Closer to pgflow: base delay 5 s, the map-breaking output kept, NULL output without completed leaves,
current counters, and the step status 'cancelled' for started steps of failed runs."""

from django.db import migrations, models

from pgflow_django.sql.runsql import RunSqlFile


class Migration(migrations.Migration):
    dependencies = [("pgflow", "0009_shape_safety")]

    operations = [
        RunSqlFile("0010_pgflow_fidelity.sql", "0010_pgflow_fidelity_down.sql"),
        migrations.AlterField(
            model_name="stepstate",
            name="status",
            field=models.TextField(
                choices=[
                    ("created", "Created"),
                    ("started", "Started"),
                    ("completed", "Completed"),
                    ("failed", "Failed"),
                    ("skipped", "Skipped"),
                    ("cancelled", "Cancelled"),
                ]
            ),
        ),
    ]
