"""Every ``pgflow_*`` command loads in a project without ``django.contrib.admin``: the admin is
optional, so no command may import the admin package (whose pages register on import)."""

from __future__ import annotations

from tests.first_hour import manage

LOAD_EVERY_COMMAND = """
from django.core.management import get_commands, load_command_class
names = sorted(name for name, app in get_commands().items() if app == "pgflow_django")
for name in names:
    load_command_class("pgflow_django", name).create_parser("manage.py", name)
print(len(names), "commands")
"""


def test_every_command_loads_without_the_admin() -> None:
    done = manage("shell", "--no-startup", "-c", LOAD_EVERY_COMMAND, env={"FIRST_HOUR_WITHOUT_ADMIN": "1"})
    assert done.returncode == 0, done.stderr
    assert int(done.stdout.split()[0]) > 15
