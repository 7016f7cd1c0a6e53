"""Versions of a flow under one slug: a changed definition is compiled beside the others, and each run
stays on the version it started on. Every existing flow becomes version 1 of its slug."""

from django.db import migrations, models
from django.db.models import Q

from pgflow_django.sql.runsql import RunSqlFile


class Migration(migrations.Migration):
    dependencies = [("pgflow", "0043_durable_waits")]

    operations = [
        RunSqlFile("0044_flow_versions.sql", "0044_flow_versions_down.sql"),
        migrations.AddField(model_name="flow", name="version_of", field=models.TextField(editable=False)),
        migrations.AddField(
            model_name="flow", name="version_number", field=models.IntegerField(editable=False)
        ),
        migrations.AddField(model_name="flow", name="version", field=models.TextField(null=True)),
        migrations.AddConstraint(
            model_name="flow",
            constraint=models.UniqueConstraint(
                fields=["version_of", "version"], name="flows_version_key", condition=Q(version__isnull=False)
            ),
        ),
        migrations.AddIndex(
            model_name="flow",
            index=models.Index(fields=["version_of", "version_number"], name="flows_version_of_idx"),
        ),
    ]
