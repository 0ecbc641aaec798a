"""The package's layout rules, read from its source: imports between dynosim's modules form no
cycle, optional dependencies are imported in one module only, and AIConfigurator is called from
``dynosim.aic`` only."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

import dynosim

PACKAGE = Path(dynosim.__file__).parent


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@functools.cache
def modules() -> dict[str, ast.Module]:
    return {module_name(p): ast.parse(p.read_text()) for p in sorted(PACKAGE.rglob("*.py"))}


def imported(name: str, tree: ast.Module, known: set[str]) -> set[str]:
    """The dynosim modules ``name`` imports anywhere (at the top or inside a function);
    ``from package import module`` imports the module (``known`` are the package's modules,
    ``_core`` the compiled one), ``from module import name`` the module."""
    package = name if (PACKAGE / Path(*name.split(".")[1:]) / "__init__.py").exists() else None
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = (package or name.rpartition(".")[0]).split(".")
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            for a in node.names:
                sub = f"{base}.{a.name}"
                out.add(sub if sub in known or a.name == "_core" else base)
    return {m for m in out if m == "dynosim" or m.startswith("dynosim.")}


def with_packages(name: str, deps: set[str]) -> set[str]:
    """``deps`` and the packages each is in, up to but not including the root: importing
    ``dynosim.a.b`` runs ``dynosim/a/__init__.py`` first, unless ``name`` is inside
    ``dynosim.a`` already (the package is then being imported)."""
    out = set(deps)
    for dep in deps:
        parts = dep.split(".")
        for i in range(2, len(parts)):
            package = ".".join(parts[:i])
            if name != package and not name.startswith(package + "."):
                out.add(package)
    return out


def graph() -> dict[str, set[str]]:
    mods = modules()
    return {
        name: {
            m
            for m in with_packages(name, imported(name, tree, set(mods)))
            if m in mods and m != name
        }
        for name, tree in mods.items()
    }


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """A cycle of the graph as a list of modules (first == last), or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for dep in sorted(edges.get(node, ())):
            if state.get(dep) == 1:
                return [*stack[stack.index(dep) :], dep]
            if dep not in state and (cycle := visit(dep)):
                return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(edges):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_the_cycle_finder_finds_a_planted_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None


def test_importing_a_module_imports_its_packages():
    # dynosim.report importing dynosim.compare.measured runs dynosim/compare/__init__.py,
    # which imports dynosim.compare.peer, which imports dynosim.report: a cycle between layers.
    deps = with_packages("dynosim.report", {"dynosim.compare.measured"})
    assert deps == {"dynosim.compare.measured", "dynosim.compare"}
    # Within its own package a module imports its siblings without the package again.
    assert with_packages("dynosim.compare.peer", {"dynosim.compare.aisimulate"}) == {
        "dynosim.compare.aisimulate"
    }
    assert with_packages("dynosim.x", {"dynosim.a.b.c"}) == {
        "dynosim.a.b.c",
        "dynosim.a.b",
        "dynosim.a",
    }


def test_imports_inside_the_package_form_no_cycle():
    edges = graph()
    # The package root re-exports the layers; nothing below may import it back.
    assert not [m for m, deps in edges.items() if "dynosim" in deps and m != "dynosim"]
    edges.pop("dynosim")
    assert find_cycle(edges) is None


OPTIONAL = (
    "aiconfigurator",
    "aiconfigurator_core",
    "dynamo",
    "pandas",
    "ray",
    "plotly",
    "matplotlib",
)


@pytest.mark.parametrize("name", sorted(modules()))
def test_optional_dependencies_are_imported_in_one_place(name):
    tree = modules()[name]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {a.name.partition(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module.partition(".")[0])
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "import_module":
            arg = node.args[0] if node.args else None
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                found.add(arg.value.partition(".")[0])
    if name != "dynosim._dependencies":
        assert not found & set(OPTIONAL), f"{name} imports {found & set(OPTIONAL)}"


def test_aiconfigurator_is_called_from_the_aic_package_only():
    callers = {
        name
        for name, tree in modules().items()
        for node in ast.walk(tree)
        if isinstance(node, ast.Name) and node.id in ("aic_core", "aic_generator")
    }
    assert callers and all(
        c.startswith("dynosim.aic.") for c in callers - {"dynosim._dependencies"}
    )
