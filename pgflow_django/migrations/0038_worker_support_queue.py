"""One worker may poll many queues: ``pgflow.worker_support.queue_name`` records the queue of each
(flow, step) pair it runs."""

from django.db import migrations, models

from pgflow_django.sql.runsql import RunSqlFile


class Migration(migrations.Migration):
    dependencies = [("pgflow", "0037_schedule_isolation")]

    operations = [
        RunSqlFile("0038_worker_support_queue.sql", "0038_worker_support_queue_down.sql"),
        migrations.AddField(model_name="workersupport", name="queue_name", field=models.TextField(null=True)),
    ]
