"""Install PGMQ, or verify the one already there (never installed over)."""

from typing import Any

from django.db import migrations


def install(apps: Any, schema_editor: Any) -> None:
    from pgflow_django.db.pgmq_install import ensure_pgmq

    with schema_editor.connection.cursor() as cursor:
        ensure_pgmq(cursor)


class Migration(migrations.Migration):
    initial = True
    dependencies: list[tuple[str, str]] = []  # type: ignore[misc]
    operations = [migrations.RunPython(install, migrations.RunPython.noop, elidable=False)]
