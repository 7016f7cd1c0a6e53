"""How ``make test`` spreads the suite over pytest-xdist workers (``-n N --dist loadgroup``).

Each xdist worker has its own test database (pytest-django appends ``_gw0``, ``_gw1``, ...), so tests
run one per worker and side by side. Two things decide which worker runs what:

- Groups. A test that uses a module-scoped fixture of the suite (a migrated second database, a
  scratch database, a private cluster...) runs on the same worker as every other user of that
  fixture, so the fixture is still built once: tests sharing a module-scoped fixture form a group per
  module, and those sharing a session-scoped one (the private PostgreSQL of the acceptance tests) one
  group for the session. Every other test is a unit of its own. A test can also name its group with
  ``@pytest.mark.xdist_group("name")``.
- Order. Units are handed out longest first (the longest-processing-time rule), from the durations a
  previous full run measured (``tests/support/durations.json``): the long waits (the pg_cron minute
  boundaries, the million-run plan histories, the browser) start at once and overlap with the many
  short tests, instead of one of them ending the run alone. A test missing from the file counts as
  an average test of its directory.

``python -m tests.support.parallel report.xml`` rewrites ``durations.json`` from the JUnit XML of a
full run (``make test PYTEST_ARGS=--junitxml=report.xml``).
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


def longest_first(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Sort the units longest first (every worker sorts the same collection the same way, as xdist
    requires; a group's tests stay together and in their order)."""
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
    for index, item in enumerate(items):
        unit = unit_of[item.nodeid]
        total[unit] += expected(_bare(item.nodeid))
        first_of.setdefault(unit, index)
    position = {item.nodeid: index for index, item in enumerate(items)}
    items.sort(
        key=lambda item: (-total[unit_of[item.nodeid]], first_of[unit_of[item.nodeid]], position[item.nodeid])
    )
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
