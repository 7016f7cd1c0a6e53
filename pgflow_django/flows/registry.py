"""Which flows this project defines: ``PGFLOW["FLOWS"]`` plus every installed app's ``flows`` module.

Read on each call rather than cached, so settings overrides in tests apply; the imports it does are
cached by Python anyway.
"""

from __future__ import annotations

from collections.abc import Mapping
from importlib import import_module
from types import ModuleType

from django.apps import apps
from django.core.exceptions import ImproperlyConfigured
from django.utils.module_loading import module_has_submodule

from pgflow_django.conf import get_settings
from pgflow_django.flows.dsl import Flow


class FlowNotRegistered(LookupError):
    """A slug that no registered flow carries."""


class TaskModuleError(ImproperlyConfigured):
    """A module the tasks backend discovers tasks in raised while it was imported."""

    def __init__(self, module: str, error: BaseException) -> None:
        self.module = module
        self.error = error
        detail = " ".join(str(error).split())
        super().__init__(
            f"task module {module!r} cannot be imported: {type(error).__name__}"
            + (f": {detail}" if detail else "")
        )


def import_task_module(name: str) -> ModuleType:
    """Import a module tasks are discovered in; whatever it raises becomes a ``TaskModuleError`` naming
    it, so a system check or a worker reports one line instead of a traceback."""
    try:
        return import_module(name)
    except Exception as exc:
        raise TaskModuleError(name, exc) from exc


def registered() -> list[tuple[Flow, str]]:
    """Every (flow, where it is registered) in registration order, duplicates and clashes included:
    the ``FLOWS`` setting's entries first, then the apps' flows modules. ``get_flows`` and the system
    checks both read it."""
    found: list[tuple[Flow, str]] = []
    for path in get_settings().flows:
        found.extend((flow, f"PGFLOW['FLOWS'] entry {path!r}") for flow in _flows_at(path))
    for app_config in apps.get_app_configs():
        if module_has_submodule(app_config.module, "flows"):
            name = f"{app_config.name}.flows"
            found.extend((flow, f"module {name}") for flow in _flows_in(import_module(name)))
    return found


def get_flows() -> dict[str, Flow]:
    """Every registered flow by slug; two flows on one slug, or on slugs differing only in case, fail."""
    found: dict[str, tuple[Flow, str]] = {}
    for flow, source in registered():
        _register(found, flow, source)
    return {slug: flow for slug, (flow, _) in found.items()}


def get_flow(slug: str, flows: Mapping[str, Flow] | None = None) -> Flow:
    """The registered flow called ``slug`` (or the one in ``flows``, a wider table such as the test
    toolkit's); the error lists the slugs there are."""
    flows = get_flows() if flows is None else flows
    try:
        return flows[slug]
    except KeyError:
        known = ", ".join(sorted(flows)) or "none"
        raise FlowNotRegistered(
            f"no registered flow {slug!r} (registered: {known}); add its dotted path to PGFLOW['FLOWS'] "
            "or define it in an installed app's flows.py"
        ) from None


def _register(found: dict[str, tuple[Flow, str]], flow: Flow, source: str) -> None:
    previous = found.get(flow.slug)
    twin = next((slug for slug in found if slug != flow.slug and slug.lower() == flow.slug.lower()), None)
    if twin is not None:
        raise ImproperlyConfigured(
            f"flows {twin!r} ({found[twin][1]}) and {flow.slug!r} ({source}) differ only in case and would "
            "share one queue; give one of them another slug"
        )
    if previous is None:
        found[flow.slug] = (flow, source)
    elif previous[0] is not flow:
        raise ImproperlyConfigured(
            f"two different flows use the slug {flow.slug!r} ({previous[1]} and {source}); "
            "give one of them another slug, e.g. with flow.copy(slug=...)"
        )


def _flows_at(path: str) -> list[Flow]:
    """A dotted path to a module (all its flows) or to one ``Flow`` attribute of a module."""
    if not isinstance(path, str) or not path:
        raise ImproperlyConfigured(
            f"PGFLOW['FLOWS'] entries must be dotted paths to flows or modules, got {path!r}"
        )
    module = _import_if_module(path)
    if module is not None:
        return _flows_in(module)
    module_name, _, attribute = path.rpartition(".")
    parent = _import_if_module(module_name) if module_name else None
    if parent is None or not hasattr(parent, attribute):
        where = f", nor attribute {attribute!r} in module {module_name!r}" if parent is not None else ""
        raise ImproperlyConfigured(
            f"PGFLOW['FLOWS'] entry {path!r}: no module {path!r}{where}; fix the dotted path"
        )
    value = getattr(parent, attribute)
    if not isinstance(value, Flow):
        raise ImproperlyConfigured(
            f"PGFLOW['FLOWS'] entry {path!r} names a {type(value).__name__}, not a Flow; "
            "point it at a Flow or at a module of flows"
        )
    return [value]


def _import_if_module(name: str) -> ModuleType | None:
    """Import ``name``; None only when that module itself is missing (errors inside it propagate)."""
    try:
        return import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and (name == exc.name or name.startswith(f"{exc.name}.")):
            return None
        raise


def _flows_in(module: ModuleType) -> list[Flow]:
    return [value for value in vars(module).values() if isinstance(value, Flow)]
