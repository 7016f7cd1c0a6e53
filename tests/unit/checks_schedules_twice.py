"""A flows module declaring one schedule name twice with different crons."""

from pgflow_django.schedules import schedule
from tests.unit.checks_schedules import scheduled

twice = scheduled.copy(slug="checks_twice")
schedule(twice, cron="0 * * * *", name="checks-twice")
schedule(twice, cron="30 * * * *", name="checks-twice")
