"""How ``make test`` spreads the suite over pytest-xdist workers (``-n N --dist loadgroup``).

Each xdist worker has its own test database (pytest-django appends ``_gw0``, ``_gw1``, ...), so tests
run one per worker and side by side. Two things decide which worker runs what:

- Groups. A test that uses a module-scoped fixture of the suite (a migrated second database, a
  scratch database, a private cluster...) runs on the same worker as every other user of that
  fixture, so the fixture is still built once: tests sharing a module-scoped fixture form a group per
  module, and those sharing a session-scoped one (the private PostgreSQL of the acceptance tests) one
  group for the session. Every other test is a unit of its own. A test can also name its group with
  ``@pytest.mark.xdist_group("name")``.
- Order. pytest-django's: the tests that roll back first, then those that commit (what they leave
  behind, which Django's flush does not empty, must not meet a test that expects a clean database
  earlier than in one process), then those without a database. In each of these parts, the units
  that take ``LONG`` seconds or more (the bench runs, the pg_cron minute boundaries, the
  million-run plan histories, the private cluster's restarts) go first, longest first, by the
  durations of a one-process run (``tests/support/durations.json``), so they start at once and
  overlap with the short tests instead of ending the run alone; the others follow as collected.
  Each xdist worker so runs a subsequence of the one-process order, but for the long units.

``python -m tests.support.parallel report.xml`` rewrites ``durations.json`` from the JUnit XML of a
one-process run (``make test TEST_WORKERS=0 PYTEST_ARGS=--junitxml=report.xml``).
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

import pytest

DURATIONS = Path(__file__).resolve().parent / "durations.json"
SHARED_SCOPES = {"module": "module", "package": "module", "session": "session"}
NOT_SHARED = {"django_db_setup", "django_db_modify_db_settings", "django_db_use_migrations"}
"""Session fixtures every test database needs: each xdist worker builds its own anyway."""
FLOOR = 0.25
"""Recorded durations below this are not stored (the default of their directory is close enough)."""
LONG = 45.0
"""Units expected to take this long (seconds, in one process) are handed out first in their part."""
"""Recorded durations below this are not stored (the default of their directory is close enough)."""


def load_durations() -> dict[str, float]:
    try:
        return {str(k): float(v) for k, v in json.loads(DURATIONS.read_text()).items()}
    except (OSError, ValueError):
        return {}


def _own_fixture_groups(item: pytest.Item, tests_root: Path) -> list[str]:
    """Group names for the module- or session-scoped fixtures of the suite that ``item`` uses."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return []
    groups = []
    for name in info.names_closure:
        for fixturedef in info.name2fixturedefs.get(name, ()):
            scope = SHARED_SCOPES.get(fixturedef.scope)
            if scope is None or name in NOT_SHARED:
                continue
            func_file = getattr(fixturedef.func, "__code__", None)
            defined_in = Path(func_file.co_filename).resolve() if func_file is not None else None
            if defined_in is None or tests_root not in defined_in.parents:
                continue  # a plugin's fixture (pytest-django's live_server...): nothing of ours to share
            if scope == "module":
                groups.append(f"module:{item.nodeid.split('::')[0]}")
            else:
                groups.append(f"session:{name}")
    return sorted(set(groups))


def _bare(nodeid: str) -> str:
    """A node id without the ``@group`` suffix xdist adds under ``--dist loadgroup``."""
    at, bracket = nodeid.rfind("@"), nodeid.rfind("]")
    return nodeid[:at] if at > bracket else nodeid


def _active(config: pytest.Config) -> bool:
    """An xdist worker of a ``--dist loadgroup`` run (xdist sets ``loadgroup`` on its workers)."""
    return hasattr(config, "workerinput") and bool(getattr(config.option, "loadgroup", False))


def _groups(item: pytest.Item) -> list[str]:
    return sorted(
        str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))
        for mark in item.iter_markers("xdist_group")
    )


def mark_groups(config: pytest.Config, items: list[pytest.Item], tests_root: Path) -> None:
    """Before xdist reads them: an ``xdist_group`` mark on each test that shares a fixture."""
    if not _active(config):
        return
    for item in items:
        if _groups(item):
            continue
        found = _own_fixture_groups(item, tests_root)
        if found:
            item.add_marker(pytest.mark.xdist_group("+".join(found)))


def database_order(item: pytest.Item) -> int:
    """pytest-django's order: tests in a rolled-back transaction (0), then tests that commit (1), then
    tests without the database (2). Tests that commit leave what Django's flush does not empty (pgflow's
    own tables, replaced functions) behind them; in this order they never run before a test that
    rolls back, on any xdist worker, as in one process."""
    from django.test import TestCase, TransactionTestCase
    from pytest_django.plugin import validate_django_db

    test_cls = getattr(item, "cls", None)
    if test_cls is not None and issubclass(test_cls, TransactionTestCase):
        return 0 if issubclass(test_cls, TestCase) else 1
    marker = item.get_closest_marker("django_db")
    transactional = False
    if marker is not None:
        transaction, reset_sequences, *_ = validate_django_db(marker)
        transactional = bool(transaction or reset_sequences)
    fixtures = getattr(item, "fixturenames", ())
    if transactional or "transactional_db" in fixtures or "live_server" in fixtures:
        return 1
    return 0 if marker is not None or "db" in fixtures else 2


def longest_first(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The order units are handed out in: pytest-django's (``database_order``), and in each of its
    three parts the units expected to take ``LONG`` seconds or more first, longest first, then the
    others as collected. Each xdist worker so runs a subsequence of the one-process order, but for the
    long units, which start at once instead of ending the run alone (every worker sorts the same
    collection the same way, as xdist requires; a group's tests stay together and in their order)."""
    if not _active(config):
        return
    durations = load_durations()
    by_directory: dict[str, list[float]] = defaultdict(list)
    for nodeid, seconds in durations.items():
        by_directory[_directory(nodeid)].append(seconds)
    default = {key: sum(values) / len(values) for key, values in by_directory.items()}

    def expected(nodeid: str) -> float:
        if nodeid in durations:
            return durations[nodeid]
        return min(default.get(_directory(nodeid), FLOOR), 5.0)

    unit_of = {
        item.nodeid: "group:" + "_".join(groups) if (groups := _groups(item)) else item.nodeid
        for item in items
    }
    total: dict[str, float] = defaultdict(float)
    first_of: dict[str, int] = {}
    part: dict[str, int] = {}
    for index, item in enumerate(items):
        unit = unit_of[item.nodeid]
        total[unit] += expected(_bare(item.nodeid))
        first_of.setdefault(unit, index)
        part[unit] = min(part.get(unit, 2), database_order(item))
    position = {item.nodeid: index for index, item in enumerate(items)}

    def key(item: pytest.Item) -> tuple[float, ...]:
        unit = unit_of[item.nodeid]
        hoisted = total[unit] >= LONG
        first = -total[unit] if hoisted else 0.0
        return (part[unit], 0 if hoisted else 1, first, first_of[unit], position[item.nodeid])

    items.sort(key=key)
    for item in items:
        _suffix_group(item)


def _suffix_group(item: pytest.Item) -> None:
    """The ``@group`` suffix by which xdist's loadgroup scheduler groups tests, where xdist's own
    could not add it (pytest 9.2 keeps the node id in ``_id``, which xdist 3.8 does not set)."""
    groups = _groups(item)
    if not groups or _bare(item.nodeid) != item.nodeid:
        return
    suffixed = f"{item.nodeid}@{'_'.join(groups)}"
    if hasattr(item, "_id"):
        from _pytest.nodeid import NodeId

        item._id = NodeId.parse(suffixed)
    else:
        item._nodeid = suffixed


def _directory(nodeid: str) -> str:
    """``tests/sql/plans/test_x.py::test_y`` -> ``sql``."""
    parts = nodeid.split("::")[0].split("/")
    return parts[1] if len(parts) > 2 else ""


def write_durations(junit_xml: Path) -> int:
    """``durations.json`` from a JUnit XML report (each test's setup + call + teardown)."""
    found: dict[str, float] = {}
    for case in ET.parse(junit_xml).getroot().iter("testcase"):
        classname, name = case.get("classname", ""), case.get("name", "")
        seconds = float(case.get("time", "0") or 0)
        if seconds < FLOOR:
            continue
        found[_nodeid(classname, name)] = round(seconds, 1)
    DURATIONS.write_text(json.dumps(dict(sorted(found.items())), indent=0) + "\n")
    return len(found)


def _nodeid(classname: str, name: str) -> str:
    """The pytest node id of a JUnit test case (``tests.sql.plans.test_x`` + ``test_y[p]``)."""
    parts = classname.split(".")
    for cut in range(len(parts), 0, -1):
        module = Path(*parts[:cut]).with_suffix(".py")
        if (Path(__file__).resolve().parents[2] / module).exists():
            return "::".join([module.as_posix(), *parts[cut:], _bare(name)])
    return f"{classname}::{name}"


if __name__ == "__main__":
    print(f"{write_durations(Path(sys.argv[1]))} durations written to {DURATIONS}")
