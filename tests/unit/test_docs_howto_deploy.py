"""docs/howto/deploy-workers.md and the glossary, without a database: the Kubernetes Deployment and the
systemd unit parse, their worker command lines parse with the real ``pgflow_worker`` parser, and what
the page says about them (grace periods, probe paths, connection counts) holds for those flags. Every
``manage.py`` line of the how-tos parses with its real command; the other how-tos' Python runs in
``tests/integration/test_docs_howto_migrating.py``."""

from __future__ import annotations

import configparser
import re
import shlex

import pytest
import yaml

from pgflow_django.worker.options import WorkerOptions
from tests.docs_commands import DOCS, blocks, manage_py_lines, parse

DEPLOY = "howto/deploy-workers.md"
HOWTOS = (DEPLOY, "howto/from-celery.md", "howto/from-django-tasks-db.md")


def _deployment() -> dict:
    [block] = blocks(DEPLOY, "yaml")
    return yaml.safe_load(block)


def _unit() -> configparser.ConfigParser:
    [block] = blocks(DEPLOY, "ini")
    unit = configparser.ConfigParser(interpolation=None, strict=False)
    unit.optionxform = str  # type: ignore[assignment,method-assign]
    unit.read_string(block)
    return unit


def test_the_deployment_runs_the_worker_and_outlasts_its_drain() -> None:
    deployment = _deployment()
    assert deployment["kind"] == "Deployment"
    pod = deployment["spec"]["template"]["spec"]
    [container] = pod["containers"]
    name, options = parse(container["command"][container["command"].index("manage.py") :])
    assert name == "pgflow_worker"
    assert pod["terminationGracePeriodSeconds"] > options.shutdown_timeout
    [port] = container["ports"]
    assert (port["name"], port["containerPort"]) == ("metrics", options.metrics_port)
    assert (
        deployment["spec"]["selector"]["matchLabels"] == deployment["spec"]["template"]["metadata"]["labels"]
    )


def test_the_probe_paths_are_the_metrics_ports() -> None:
    [container] = _deployment()["spec"]["template"]["spec"]["containers"]
    probes = {
        kind: container[kind]["httpGet"] for kind in ("startupProbe", "livenessProbe", "readinessProbe")
    }
    assert probes["startupProbe"] == probes["livenessProbe"] == {"path": "/healthz", "port": "metrics"}
    assert probes["readinessProbe"] == {"path": "/readyz", "port": "metrics"}
    parser = _worker_parser()
    [metrics] = [action for action in parser._actions if "--metrics-port" in action.option_strings]
    assert "/healthz and /readyz" in (metrics.help or "")


def test_the_startup_probe_outlasts_the_liveness_probe() -> None:
    """The port opens only after the start-up checks: the startup probe gives a slow start longer than
    the liveness probe would before the kubelet restarts the container."""
    [container] = _deployment()["spec"]["template"]["spec"]["containers"]

    def patience(kind: str) -> int:
        return container[kind]["periodSeconds"] * container[kind]["failureThreshold"]

    assert patience("startupProbe") > patience("livenessProbe")


def test_the_connection_counts_are_the_workers() -> None:
    [container] = _deployment()["spec"]["template"]["spec"]["containers"]
    _, options = parse(container["command"][container["command"].index("manage.py") :])
    per_worker = WorkerOptions.from_settings(concurrency=options.concurrency).max_connections
    text = (DOCS / DEPLOY).read_text(encoding="utf-8")
    said = re.search(
        r"each\s+replica holds at most\s+(\d+) connections, so the (\w+) replicas below hold at most (\d+)",
        text,
    )
    assert said, "the page no longer states the connections of the Deployment"
    replicas = _deployment()["spec"]["replicas"]
    assert said[2] == {3: "three"}[replicas]
    assert (int(said[1]), int(said[3])) == (per_worker, per_worker * replicas)


def test_the_systemd_unit_stops_with_sigterm_after_the_drain() -> None:
    unit = _unit()
    service = unit["Service"]
    words = shlex.split(service["ExecStart"])
    name, options = parse(words[words.index("manage.py") :])
    assert name == "pgflow_worker"
    assert service["KillSignal"] == "SIGTERM"
    assert service["KillMode"] == "mixed"
    assert int(service["TimeoutStopSec"]) > options.shutdown_timeout
    assert service["Restart"] == "always"
    assert unit["Install"]["WantedBy"] == "multi-user.target"
    assert "StartLimitBurst" in unit["Unit"]


@pytest.mark.parametrize("page", HOWTOS)
def test_every_manage_py_line_parses(page: str) -> None:
    lines = [words for block in blocks(page, "sh") for words in manage_py_lines(block)]
    assert lines
    for words in lines:
        parse(words)


def test_the_glossary_defines_the_words_the_docs_use() -> None:
    text = (DOCS / "glossary.md").read_text(encoding="utf-8")
    terms = re.findall(r"^## (.+)$", text, re.MULTILINE)
    assert terms == sorted(terms, key=str.lower)
    for word in (
        "Run",
        "Step",
        "Task",
        "Attempt",
        "Queue",
        "Subscription",
        "Pause",
        "Lease",
        "Map step",
        "Flow version",
        "Stalled task",
        "Visibility timeout",
    ):
        assert word in terms, word
    for entry in re.split(r"^## .+$", text, flags=re.MULTILINE)[1:]:
        assert "](" in entry, f"a glossary entry links to no page: {entry.strip()[:60]!r}"


def _worker_parser():
    from django.core.management import load_command_class

    return load_command_class("pgflow_django", "pgflow_worker").create_parser("manage.py", "pgflow_worker")
