"""The versions of a flow from the command line: ``pgflow_versions`` (text at 80 and 120 columns, JSON,
an unknown flow), ``pgflow_delete_flow --version`` (a drained version only), ``pgflow_compile``'s
``new version`` line and ``pgflow_health`` naming an earlier version's unfinished run. docs/commands.md
shows the listing's header as the command prints it."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from django.core.management import CommandError
from django.test import TestCase

from pgflow_django import compile_flow, start_flow
from pgflow_django.testing import drain
from tests.integration.commands_support import call, manage_in_process
from tests.integration.versions.test_versions import release
from tests.support.db import value

DOC = Path(__file__).resolve().parents[3] / "docs" / "commands.md"


class VersionCommandTests(TestCase):
    def setUp(self) -> None:
        self.v1, self.v2 = release(1), release(2)
        compile_flow(self.v1)
        self.old_run = start_flow(self.v1, {})
        compile_flow(self.v2)
        start_flow(self.v2, {})

    def test_the_listing_names_each_version_and_its_state(self) -> None:
        wide = manage_in_process("pgflow_versions", "vers", env={"COLUMNS": "120"})
        assert wide.returncode == 0, wide.stderr
        lines = [line.rstrip() for line in wide.stdout.splitlines()]
        assert lines[0].split() == [
            "VERSION",
            "STORED",
            "AS",
            "STATE",
            "UNFINISHED",
            "COMPLETED",
            "FAILED",
            "WORKERS",
            "FIRST",
            "START",
            "LAST",
            "START",
        ]
        assert lines[1].split()[:7] == ["v1", "vers", "serving", "1", "0", "0", "0"]
        assert lines[2].split()[:7] == ["v2", "vers___v2", "newest", "1", "0", "0", "0"]
        narrow = manage_in_process("pgflow_versions", "vers", env={"COLUMNS": "80"})
        assert max(len(line) for line in narrow.stdout.splitlines()) <= 80
        assert "stored as: vers___v2  state: newest" in narrow.stdout

    def test_the_documented_header_is_the_commands(self) -> None:
        section = DOC.read_text(encoding="utf-8").split("## pgflow_versions", 1)[1]
        documented = re.search(r"\$ manage.py pgflow_versions orders\n(.*)\n", section)
        assert documented is not None
        printed = manage_in_process("pgflow_versions", "vers", env={"COLUMNS": "120"}).stdout.splitlines()[0]
        assert documented.group(1).split() == printed.split()

    def test_json_and_an_unknown_flow(self) -> None:
        drain(flows=[self.v1])
        out, _ = call("pgflow_versions", "vers", "--format", "json")
        listed = json.loads(out)
        assert [(v["version_number"], v["state"], v["drained"], v["runs"]) for v in listed] == [
            (1, "drained", True, {"started": 0, "completed": 1, "failed": 0}),
            (2, "newest", False, {"started": 1, "completed": 0, "failed": 0}),
        ]
        assert listed[1]["version"] == self.v2.version_key
        unknown = manage_in_process("pgflow_versions", "verz")
        assert unknown.returncode == 1
        assert unknown.stderr.strip().startswith("CommandError: no flow 'verz'")
        assert "(compiled flows: vers)" in unknown.stderr, "each flow named once, whatever its versions"

    def test_delete_takes_only_a_drained_version(self) -> None:
        with pytest.raises(CommandError, match=r"v1 of flow 'vers' has 1 unfinished run\(s\)"):
            call("pgflow_delete_flow", "vers", "--version", "1", "--yes")
        with pytest.raises(CommandError, match="v2 is the newest version of flow 'vers'"):
            call("pgflow_delete_flow", "vers", "--version", "v2", "--yes")
        with pytest.raises(
            CommandError, match=r"flow 'vers' has 2 versions \(v1, v2\): delete the drained ones"
        ):
            call("pgflow_delete_flow", "vers", "--yes")
        with pytest.raises(CommandError, match=r"flow 'vers' has no version '7' \(versions: v1, v2\)"):
            call("pgflow_delete_flow", "vers", "--version", "7", "--yes")
        drain(flows=[self.v1])
        out, _ = call("pgflow_delete_flow", "vers", "--version", "1", "--yes")
        assert out.strip() == "deleted v1 of flow 'vers' (vers): 1 run(s) and its queue"
        assert value("select count(*) from pgflow.flows where version_of = 'vers'") == 1

    def test_health_names_an_earlier_versions_unfinished_run(self) -> None:
        health = manage_in_process("pgflow_health", "--flow", "vers")
        assert health.returncode == 1
        lines = health.stderr.strip().splitlines()
        assert (
            "flow vers: no live worker runs step first of an earlier version (vers), which has 1 unfinished "
            "run(s); start a worker with that version's code, or cancel them (manage.py pgflow_versions vers)"
        ) in lines
        assert "no live worker runs flow vers___v2 step first; start manage.py pgflow_worker for it" in lines
        drain(flows=[self.v1])
        after = manage_in_process("pgflow_health", "--flow", "vers").stderr
        assert "earlier version" not in after, "a drained version needs no worker"

    def test_runs_of_every_version_are_listed_by_the_flows_slug(self) -> None:
        out, _ = call("pgflow_runs", "--flow", "vers", "--format", "json")
        assert sorted(run["flow_slug"] for run in json.loads(out)) == ["vers", "vers___v2"]
        out, _ = call("pgflow_runs", "--flow", "vers___v2", "--format", "json")
        assert [run["flow_slug"] for run in json.loads(out)] == ["vers___v2"]

    def test_compile_prints_the_new_version(self) -> None:
        result = manage_in_process(
            "pgflow_compile",
            "vers",
            settings={"PGFLOW": {"FLOWS": ["tests.integration.versions.test_commands_versions.RELEASE_3"]}},
        )
        assert result.returncode == 0, result.stderr
        assert result.stdout.split() == ["new", "version", "vers___v3"]


RELEASE_3 = release(3, timeout=45)
