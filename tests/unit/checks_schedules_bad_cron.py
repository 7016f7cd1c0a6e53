"""A flows module whose schedule(...) has a cron minute out of range: it cannot be imported."""

from pgflow_django.schedules import schedule
from tests.unit.checks_schedules import scheduled

bad = scheduled.copy(slug="checks_bad_cron")
schedule(bad, cron="61 * * * *", name="checks-bad-cron")
