from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("example", "0001_initial")]
    operations = [
        migrations.CreateModel(
            name="SupportThread",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("subject", models.CharField(max_length=200)),
                ("messages", models.JSONField(default=list)),
                ("acknowledged_at", models.DateTimeField(null=True)),
                ("labels", models.JSONField(default=list)),
                ("team", models.CharField(blank=True, max_length=50)),
                ("routed_at", models.DateTimeField(null=True)),
                ("classify_done", models.BooleanField(default=False)),
            ],
        ),
    ]
