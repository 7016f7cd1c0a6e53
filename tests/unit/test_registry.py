from __future__ import annotations

import pytest
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings

from pgflow_django.flows.registry import FlowNotRegistered, get_flow, get_flows
from tests.unit import registry_flows

MODULE = "tests.unit.registry_flows"


def flows_setting(*paths: str) -> override_settings:
    return override_settings(PGFLOW={"FLOWS": list(paths)})


def test_module_path_registers_every_flow_in_it() -> None:
    with flows_setting(MODULE):
        flows = get_flows()
    assert flows["registry_alpha"] is registry_flows.alpha
    assert flows["registry_beta"] is registry_flows.beta


def test_attribute_path_registers_one_flow() -> None:
    with flows_setting(f"{MODULE}.alpha"):
        flows = get_flows()
    assert flows["registry_alpha"] is registry_flows.alpha
    assert "registry_beta" not in flows


def test_the_same_object_through_two_paths_is_one_flow() -> None:
    with flows_setting(f"{MODULE}.alpha", MODULE):
        assert get_flow("registry_alpha") is registry_flows.alpha


def test_two_objects_with_one_slug_are_refused() -> None:
    with (
        flows_setting(MODULE, "tests.unit.registry_flows_clash"),
        pytest.raises(ImproperlyConfigured, match=r"two different flows use the slug 'registry_alpha'"),
    ):
        get_flows()


@pytest.mark.parametrize(
    ("path", "message"),
    [
        (
            "tests.unit.no_such_module",
            "no module 'tests.unit.no_such_module', nor attribute 'no_such_module' in",
        ),
        ("no_such_package.flows", "no module 'no_such_package.flows'"),
        ("no_such_package", "no module 'no_such_package'"),
        (f"{MODULE}.missing", "nor attribute 'missing' in module 'tests.unit.registry_flows'"),
        (f"{MODULE}.not_a_flow", "names a int, not a Flow"),
        ("", "must be dotted paths"),
    ],
)
def test_bad_paths(path: str, message: str) -> None:
    with flows_setting(path), pytest.raises(ImproperlyConfigured, match=message):
        get_flows()


def test_errors_inside_a_flows_module_propagate() -> None:
    with (
        flows_setting("tests.unit.registry_flows_broken"),
        pytest.raises(ModuleNotFoundError, match="no_such_dependency_for_registry_tests"),
    ):
        get_flows()


def test_installed_apps_flows_modules_are_discovered() -> None:
    apps = [*settings.INSTALLED_APPS, "tests.unit.registry_app"]
    with override_settings(INSTALLED_APPS=apps, PGFLOW={"FLOWS": []}):
        flows = get_flows()
    assert "registry_discovered" in flows
    assert flows["registry_beta"] is registry_flows.beta
    assert "registry_alpha" not in flows


def test_get_flow_lists_the_registered_slugs() -> None:
    with (
        flows_setting(MODULE),
        pytest.raises(
            FlowNotRegistered,
            match=r"no registered flow 'nope' \(registered: .*registry_alpha, registry_beta",
        ),
    ):
        get_flow("nope")
