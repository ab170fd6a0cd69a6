"""Layers only go down: the import rules of the ``onboard`` package, read from the sources.

Every module is parsed (``ast``), never imported. Rules:

- ``onboard.drivers`` imports nothing of onboard but ``onboard.drivers`` and ``onboard.base``
  (deferred imports, inside functions or under ``TYPE_CHECKING``, included);
- ``onboard.base`` imports only ``onboard.base``;
- nothing the robot runs imports ``onboard.testing`` (the stand-ins are test doubles): only
  ``onboard.cli`` and ``onboard.testing`` itself may, besides tests and benchmarks;
- module-level imports among onboard modules have no cycle;
- nothing imports the folder names ``runtime`` or ``drivers``: the one importable name is
  ``onboard`` (tests, benchmarks and model scripts included).

Each failure names the offending edge: ``importer -> imported (file:line)``.
"""

from __future__ import annotations

import ast
import tomllib
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = ("tests", "bench", "models", "tools")
MAY_IMPORT_TESTING = ("onboard.cli", "onboard.testing", "onboard.evaluation")
#: the judges read the twin's truth: the robot never imports them, only the CLI does
MAY_IMPORT_EVALUATION = ("onboard.cli", "onboard.evaluation")
#: the packages of the kinds of skill: the generic loop (onboard.loop) imports none of them
KIND_PACKAGES = ("onboard.hri", "onboard.manip", "onboard.replan", "onboard.collab")


@dataclass(frozen=True)
class Edge:
    importer: str
    imported: str
    path: Path
    line: int
    deferred: bool  # inside a function or under TYPE_CHECKING: not run at import time

    def __str__(self) -> str:
        where = self.path.relative_to(ROOT) if self.path.is_relative_to(ROOT) else self.path
        return f"{self.importer} -> {self.imported} ({where}:{self.line})"


def within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def onboard_modules() -> dict[str, Path]:
    """Every module of the package, by the name pyproject.toml installs it under."""
    setup = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]
    package_dir: dict[str, str] = setup["setuptools"]["package-dir"]
    modules = {}
    for package in setup["setuptools"]["packages"]:
        parts = package.split(".")
        n = max(n for n in range(len(parts) + 1) if ".".join(parts[:n]) in package_dir)
        folder = ROOT.joinpath(package_dir[".".join(parts[:n])], *parts[n:])
        for path in folder.glob("*.py"):
            modules[package if path.stem == "__init__" else f"{package}.{path.stem}"] = path
    return modules


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(node: ast.AST, deferred: bool) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool]]:
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.Import | ast.ImportFrom):
            yield child, deferred
        elif isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            yield from _imports(child, True)
        elif isinstance(child, ast.If) and _is_type_checking(child.test):
            for stmt in child.body:
                yield from _imports(ast.Module(body=[stmt], type_ignores=[]), True)
            for stmt in child.orelse:
                yield from _imports(ast.Module(body=[stmt], type_ignores=[]), deferred)
        else:
            yield from _imports(child, deferred)


def edges(importer: str, path: Path, source: str, known: Iterable[str]) -> list[Edge]:
    """What ``importer`` imports; ``from pkg import mod`` is an edge to the module ``pkg.mod``."""
    known = set(known)
    is_package = path.name == "__init__.py"
    found = []
    for node, deferred in _imports(ast.parse(source, str(path)), False):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        else:
            base = node.module or ""
            if node.level:
                anchor = importer.split(".")
                anchor = anchor[: len(anchor) - node.level + (1 if is_package else 0)]
                base = ".".join([*anchor, *([base] if base else [])])
            targets = [
                f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base
                for alias in node.names
            ]
        found += [Edge(importer, t, path, node.lineno, deferred) for t in dict.fromkeys(targets)]
    return found


def graph(modules: Mapping[str, Path]) -> list[Edge]:
    out = []
    for name, path in sorted(modules.items()):
        out += edges(name, path, path.read_text(encoding="utf-8"), modules)
    return [e for e in out if within(e.imported, "onboard")]


def drivers_violations(all_edges: Iterable[Edge]) -> list[Edge]:
    return [
        e
        for e in all_edges
        if within(e.importer, "onboard.drivers")
        and not within(e.imported, "onboard.drivers")
        and not within(e.imported, "onboard.base")
    ]


def base_violations(all_edges: Iterable[Edge]) -> list[Edge]:
    return [
        e
        for e in all_edges
        if within(e.importer, "onboard.base") and not within(e.imported, "onboard.base")
    ]


def imported_from_outside(
    all_edges: Iterable[Edge], package: str, importers: Iterable[str]
) -> list[Edge]:
    """The edges into ``package`` from a module outside ``importers``."""
    allowed = tuple(importers)
    return [
        e
        for e in all_edges
        if within(e.imported, package) and not any(within(e.importer, p) for p in allowed)
    ]


def stand_in_violations(all_edges: Iterable[Edge]) -> list[Edge]:
    return imported_from_outside(all_edges, "onboard.testing", MAY_IMPORT_TESTING)


def evaluation_violations(all_edges: Iterable[Edge]) -> list[Edge]:
    return imported_from_outside(all_edges, "onboard.evaluation", MAY_IMPORT_EVALUATION)


def team_standin_violations(all_edges: Iterable[Edge]) -> list[Edge]:
    return [
        e
        for e in all_edges
        if within(e.importer, "onboard.testing.team_standin")
        and within(e.imported, "onboard.collab")
        and not within(e.imported, "onboard.collab.kitchen")
    ]


def loop_violations(all_edges: Iterable[Edge]) -> list[Edge]:
    return [
        e
        for e in all_edges
        if within(e.importer, "onboard.loop") and any(within(e.imported, p) for p in KIND_PACKAGES)
    ]


def find_cycle(all_edges: Iterable[Edge]) -> list[Edge]:
    """One cycle among module-level imports, as its edges; [] when there is none."""
    out: dict[str, list[Edge]] = {}
    for e in all_edges:
        if not e.deferred and e.importer != e.imported:
            out.setdefault(e.importer, []).append(e)
    done: set[str] = set()
    path: list[Edge] = []  # the edges from the first node to the one being visited
    on_path: list[str] = []

    def visit(node: str) -> list[Edge]:
        on_path.append(node)
        for e in out.get(node, []):
            if e.imported in on_path:
                return [*path[on_path.index(e.imported) :], e]
            if e.imported not in done:
                path.append(e)
                cycle = visit(e.imported)
                if cycle:
                    return cycle
                path.pop()
        on_path.pop()
        done.add(node)
        return []

    for node in sorted(out):
        if node not in done:
            cycle = visit(node)
            if cycle:
                return cycle
    return []


def report(violations: Iterable[Edge]) -> str:
    return "\n".join(str(e) for e in violations)


@pytest.fixture(scope="module")
def onboard_graph() -> list[Edge]:
    return graph(onboard_modules())


def test_the_package_is_all_there() -> None:
    modules = onboard_modules()
    assert {"onboard", "onboard.base.errors", "onboard.loop.engine", "onboard.drivers"} <= set(
        modules
    )
    on_disk = [p for folder in ("runtime", "drivers") for p in (ROOT / folder).rglob("*.py")]
    # the data packages onboard.skills, onboard.models and onboard.tasks: only their
    # __init__.py is code
    on_disk += [ROOT / name / "__init__.py" for name in ("skills", "models", "tasks")]
    assert sorted(on_disk) == sorted(modules.values()), "a module outside the listed packages"


def test_drivers_import_only_drivers_and_base(onboard_graph: list[Edge]) -> None:
    assert not drivers_violations(onboard_graph), report(drivers_violations(onboard_graph))


def test_base_imports_only_base(onboard_graph: list[Edge]) -> None:
    assert not base_violations(onboard_graph), report(base_violations(onboard_graph))


def test_only_the_cli_imports_the_test_doubles(onboard_graph: list[Edge]) -> None:
    assert not stand_in_violations(onboard_graph), report(stand_in_violations(onboard_graph))


def test_only_the_cli_imports_the_evaluation(onboard_graph: list[Edge]) -> None:
    assert not evaluation_violations(onboard_graph), report(evaluation_violations(onboard_graph))


def test_the_team_stand_in_imports_only_the_kitchen_rules_of_collab(
    onboard_graph: list[Edge],
) -> None:
    """The team stand-in sees only the request: of the team code it shares only the kitchen's
    pure rules (it reads the kitchen back from the prompt's text), no simulator or critic."""
    assert not team_standin_violations(onboard_graph), report(
        team_standin_violations(onboard_graph)
    )


def test_the_generic_loop_imports_no_kind_of_skill(onboard_graph: list[Edge]) -> None:
    """onboard.loop (the runner, its seams, events, clock, recordings) knows no kind: a kind
    fills the seams from its own package, not even lazily imported by the loop."""
    assert not loop_violations(onboard_graph), report(loop_violations(onboard_graph))


def test_module_level_imports_have_no_cycle(onboard_graph: list[Edge]) -> None:
    cycle = find_cycle(onboard_graph)
    assert not cycle, "import cycle:\n" + report(cycle)


def test_nothing_imports_the_folder_names() -> None:
    files = [*onboard_modules().items()]
    files += [(p.stem, p) for folder in SCRIPTS for p in sorted((ROOT / folder).rglob("*.py"))]
    old = [
        e
        for name, path in files
        for e in edges(name, path, path.read_text(encoding="utf-8"), ())
        if e.imported.split(".")[0] in ("runtime", "drivers")
    ]
    assert not old, "import onboard..., not the folder:\n" + report(old)


# The rules fail when they should: each names the offending edge.


def synthetic(sources: Mapping[str, str]) -> list[Edge]:
    out = []
    for name, source in sources.items():
        out += edges(name, ROOT / f"{name}.py", source, sources)
    return [e for e in out if within(e.imported, "onboard")]


def test_a_driver_importing_the_runtime_is_reported() -> None:
    found = synthetic({
        "onboard.drivers.arm.x": "from onboard.base.errors import ArmError\n"
                                 "def f():\n    from onboard.config import RobotConfig\n",
    })  # fmt: skip
    assert [str(e).split(" (")[0] for e in drivers_violations(found)] == [
        "onboard.drivers.arm.x -> onboard.config"
    ]


def test_the_loop_importing_a_stand_in_is_reported() -> None:
    found = synthetic({
        "onboard.loop.engine": "if TYPE_CHECKING:\n"
                               "    from onboard.testing import standin_server\n",
        "onboard.cli.run": "from onboard.testing.standin_server import StandInServer\n",
        "onboard.testing.standin_server": "",
    })  # fmt: skip
    violations = stand_in_violations(found)
    assert [(e.importer, e.imported, e.line) for e in violations] == [
        ("onboard.loop.engine", "onboard.testing.standin_server", 2)
    ]


def test_the_loop_importing_a_kind_is_reported() -> None:
    found = synthetic({
        "onboard.loop.engine": "def f():\n    from onboard.hri.events import EventManager\n",
        "onboard.hri.events": "from onboard.loop.clock import Clock\n",
        "onboard.loop.clock": "",
    })  # fmt: skip
    assert [str(e).split(" (")[0] for e in loop_violations(found)] == [
        "onboard.loop.engine -> onboard.hri.events"
    ]


def test_a_cycle_is_reported_and_deferred_imports_break_none() -> None:
    found = synthetic({
        "onboard.a": "import onboard.b\n",
        "onboard.b": "from onboard import c\n",
        "onboard.c": "from onboard.a import thing\n",
        "onboard.d": "def f():\n    import onboard.a\n",
        "onboard.e": "import onboard.d\n",
    })  # fmt: skip
    cycle = find_cycle(found)
    assert [(e.importer, e.imported) for e in cycle] == [
        ("onboard.a", "onboard.b"),
        ("onboard.b", "onboard.c"),
        ("onboard.c", "onboard.a"),
    ]
    assert "onboard.c -> onboard.a (onboard.c.py:1)" in report(cycle)
    assert find_cycle([e for e in found if e.importer != "onboard.c"]) == []
