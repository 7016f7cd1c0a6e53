"""The modules of pgflow_django, and its packages, import each other without a cycle.

Every import counts: the ones inside functions (a lazy import only hides a loop until the day someone
moves it to the top), those under ``if TYPE_CHECKING:`` (a type-only import is still a dependency a
reader follows), and a module named in a string for a lazy import (a ``_LAZY`` table,
``import_module``, ``import_string``; a logger's name is not one). Importing ``a.b.c`` runs the
``__init__`` of ``a.b`` first, so an import also reaches the packages above its target (those above
the importing module itself are already initialised).
At package level each top-level package (``worker``, ``runs``, ...) or top-level module is one node.
Django migrations are not part of the graph.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pgflow_django

PACKAGE_DIR = Path(pgflow_django.__file__).resolve().parent


def _modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        relative = path.relative_to(PACKAGE_DIR.parent).with_suffix("")
        if "migrations" in relative.parts and relative.parts[1] == "migrations":
            continue
        parts = list(relative.parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _named_module(text: str, modules: dict[str, Path]) -> set[str]:
    """The module a string names for a lazy import: a ``_LAZY`` table's value, ``import_module``'s
    or ``import_string``'s argument (a module path, or a module path and one attribute)."""
    if not text.startswith("pgflow_django") or not text.replace(".", "").replace("_", "").isalnum():
        return set()
    if text in modules:
        return {text}
    owner = text.rpartition(".")[0]
    return {owner} if owner in modules else set()


def _targets(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The pgflow_django modules that importing ``name`` runs, its own packages excluded."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    tree = ast.parse(path.read_text(encoding="utf-8"))
    direct: set[str] = set()
    logger_names = {
        id(argument)
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and getattr(node.func, "attr", getattr(node.func, "id", "")) == "getLogger"
        for argument in node.args
    }
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            direct.update(alias.name for alias in node.names if alias.name in modules)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([node.module] if node.module else [])])
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                if submodule in modules:
                    direct.add(submodule)
                elif base in modules:
                    direct.add(base)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in logger_names:
            direct.update(_named_module(node.value, modules))
    own = {".".join(name.split(".")[:i]) for i in range(1, name.count(".") + 2)}
    reached = set(direct)
    for target in direct:
        parts = target.split(".")
        reached.update(".".join(parts[:i]) for i in range(1, len(parts)))
    return {target for target in reached if target in modules and target not in own}


def import_graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _targets(name, path, modules) for name, path in modules.items()}


def unit_of(module: str) -> str:
    """The package-level node of a module: its top-level package or module under pgflow_django."""
    return ".".join(module.split(".")[:2])


def package_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    packages: dict[str, set[str]] = {}
    for name, targets in graph.items():
        unit = unit_of(name)
        packages.setdefault(unit, set()).update(
            unit_of(target) for target in targets if unit_of(target) not in {unit, "pgflow_django"}
        )
    return packages


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component: list[str] = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_pgflow_django_imports_have_no_cycle() -> None:
    graph = import_graph()
    assert "pgflow_django.worker.runner" in graph and "pgflow_django.tasks" in graph
    assert "pgflow_django.runs.encoding" in graph["pgflow_django.tasks.results"]
    assert cycles(graph) == []


def test_pgflow_django_packages_import_each_other_one_way() -> None:
    packages = package_graph(import_graph())
    assert "pgflow_django.flows" in packages["pgflow_django.worker"]
    assert cycles(packages) == []


def test_a_type_only_import_and_a_lazy_name_count() -> None:
    graph = import_graph()
    assert "pgflow_django.tasks.backend" in graph["pgflow_django.tasks"]  # a type-only import and _LAZY
    assert "pgflow_django.runs.client" in graph["pgflow_django"]  # in _LAZY, and under TYPE_CHECKING
    assert "pgflow_django.flows.slugs" in graph["pgflow_django.tasks"]


def test_the_graph_sees_a_loop_through_a_package_and_a_lazy_import() -> None:
    graph = import_graph()
    graph["pgflow_django.tasks.results"] = graph["pgflow_django.tasks.results"] | {"pgflow_django.worker"}
    assert "pgflow_django.tasks" in graph["pgflow_django.worker.task_flows"]
    assert any({"pgflow_django.tasks.results", "pgflow_django.worker"} <= set(loop) for loop in cycles(graph))
    assert any("pgflow_django.worker" in loop for loop in cycles(package_graph(graph)))


def test_the_statement_layer_sits_under_every_package() -> None:
    packages = package_graph(import_graph())
    assert packages["pgflow_django.db"] <= {"pgflow_django.conf", "pgflow_django.sql"}
    assert not any(
        "pgflow_django.worker" in packages[name] for name in ("pgflow_django.tasks", "pgflow_django.runs")
    )
