from django.apps import AppConfig


class PgflowConfig(AppConfig):
    name = "pgflow_django"
    label = "pgflow"
    verbose_name = "pgflow workflows"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from pgflow_django import checks  # noqa: F401  (registers the system checks)
