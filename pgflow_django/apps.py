from django.apps import AppConfig


class PgflowConfig(AppConfig):
    name = "pgflow_django"
    label = "pgflow"
    verbose_name = "pgflow workflows"
    default_auto_field = "django.db.models.BigAutoField"
