"""The package's import graph has no cycle: not between modules, not between the packages
of the architecture (cli, launch, train, spec, ...). Every import counts, those inside
functions and under TYPE_CHECKING too, and so does a module named in a string (lazy
loading through ``importlib``)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import dmlbench

ROOT = Path(dmlbench.__file__).parent


def modules() -> dict[str, Path]:
    found = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = ["dmlbench", *path.relative_to(ROOT).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def imported(module: str, path: Path, known: dict[str, Path]) -> Iterator[str]:
    """Every dmlbench module ``module`` imports, resolved to the module that holds it."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            names = [base, *(f"{base}.{alias.name}" for alias in node.names)]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            names = [node.value] if node.value in known else []
        for name in names:
            while name and name not in known:
                name = name.rpartition(".")[0]
            if name and name != module and not module.startswith(name + "."):
                yield name


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in edges.get(node, ()):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                other = stack.pop()
                component.append(other)
                if other == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def graph() -> dict[str, set[str]]:
    known = modules()
    return {name: set(imported(name, path, known)) for name, path in known.items()}


def test_no_module_imports_itself_through_others() -> None:
    assert cycles(graph()) == []


def test_the_architectures_packages_form_no_cycle() -> None:
    def part(module: str) -> str:
        return ".".join(module.split(".")[:2])

    packages: dict[str, set[str]] = {}
    for module, targets in graph().items():
        packages.setdefault(part(module), set()).update(
            part(t) for t in targets if part(t) not in (part(module), "dmlbench")
        )
    assert cycles(packages) == []


# The main stack of docs/architecture.md, top first, and what the packages beside it
# may not reach into (the layers that run things).
STACK = ["cli", "sweep", "launch", "train", "resolve", "results", "spec"]
BESIDE = {
    "perfmodel": {"cli", "sweep", "launch", "train", "report", "advise"},
    "models": {"cli", "sweep", "launch", "train", "resolve"},
    "report": {"cli", "sweep", "launch", "train"},
    "advise": {"cli", "sweep", "launch", "train"},
}


def _package(module: str) -> str:
    return module.split(".")[1] if module.count(".") else ""


def test_no_import_runs_back_up_a_layer() -> None:
    """Nothing in the stack imports a layer above it (FLOP counting lives in models,
    where the trainer and the performance model both reach it from above)."""
    up = []
    for module, targets in graph().items():
        here = _package(module)
        for target in targets:
            there = _package(target)
            if here in STACK and there in STACK and STACK.index(there) < STACK.index(here):
                up.append(f"{module} -> {target}")
            if there in BESIDE.get(here, ()):
                up.append(f"{module} -> {target}")
    assert up == []


def test_the_walk_sees_imports_inside_functions_and_strings(tmp_path: Path) -> None:
    """The checker itself: a cycle made only of a function-level import and a module
    named in a string is found."""
    a, b = tmp_path / "a.py", tmp_path / "b.py"
    a.write_text("def f():\n    from dmlbench.b import g\n")
    b.write_text("import importlib\nM = importlib.import_module('dmlbench.a')\n")
    known = {"dmlbench.a": a, "dmlbench.b": b}
    edges = {name: set(imported(name, path, known)) for name, path in known.items()}
    assert edges == {"dmlbench.a": {"dmlbench.b"}, "dmlbench.b": {"dmlbench.a"}}
    assert cycles(edges) == [["dmlbench.a", "dmlbench.b"]]


def test_modules_stay_readable_in_one_sitting() -> None:
    """A CLI module parses and prints, in at most 300 lines; no module of the package is
    over 500 (the bounds the architecture review set)."""
    lengths = {name: len(path.read_text().splitlines()) for name, path in modules().items()}
    long_cli = {n: k for n, k in lengths.items() if n.startswith("dmlbench.cli.") and k > 300}
    assert not long_cli, long_cli
    assert not {n: k for n, k in lengths.items() if k > 500}
