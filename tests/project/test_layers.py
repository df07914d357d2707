"""The layers (README, "How it fits together"): ropelab.core ← ropelab.analysis ← ropelab.experiments ← the entry
points, each importing only those below it (import-linter's contracts in pyproject.toml), the top level holding
nothing but the ``ropelab`` command line (and the loggers' old name), and no import cycle among ropelab's and tasks'
modules (grimp's import graph)."""

import ast
import subprocess
import sys
import tomllib
from pathlib import Path

import grimp

from conftest import ROOT

PACKAGE = ROOT / "src" / "ropelab"
LAYERS = ("core", "analysis", "experiments")


def _contracts() -> dict[str, dict]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    return {c["id"]: c for c in config["contracts"]}


def _entry_points() -> set[str]:
    """ropelab's top-level modules: everything beside the three layer packages."""
    return {f"ropelab.{p.stem if p.suffix == '.py' else p.name}" for p in PACKAGE.iterdir()
            if p.name not in ("__init__.py", "__pycache__", *LAYERS) and (p.suffix == ".py" or (p / "__init__.py").is_file())}


def test_the_layer_contracts_hold():
    """lint-imports names each import that breaks a contract (e.g. ``ropelab.core.build -> ropelab.analysis.stats
    (l.12)``) and fails."""
    lint = Path(sys.executable).parent / "lint-imports"
    result = subprocess.run([str(lint), "--no-cache", "--config", "pyproject.toml"], cwd=ROOT, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert "Contracts: 2 kept, 0 broken." in result.stdout


def test_every_top_level_module_is_a_listed_entry_point_and_only_the_command_line_holds_code():
    contracts = _contracts()
    top = {name.strip() for name in contracts["layers"]["layers"][0].split(":")}
    assert [layer for layer in contracts["layers"]["layers"][1:]] == [f"ropelab.{layer}" for layer in reversed(LAYERS)]
    assert _entry_points() == top, "a top-level module of ropelab must be an entry point listed in pyproject.toml"
    assert set(contracts["tasks"]["forbidden_modules"]) == top | {"ropelab.analysis", "ropelab.experiments"}
    for path in PACKAGE.glob("*.py"):
        if path.name in ("__init__.py", "cli.py"):
            continue
        for node in ast.parse(path.read_text()).body:  # a docstring, imports, __all__ and a call of the command line
            assert isinstance(node, (ast.Expr, ast.Import, ast.ImportFrom, ast.If, ast.Assign)), \
                f"{path.relative_to(ROOT)} defines {type(node).__name__} at line {node.lineno}: code goes into a layer"


def _cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for imported in sorted(graph.find_modules_directly_imported_by(module)):
            if imported not in index:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in stack:
                low[module] = min(low[module], index[imported])
        if low[module] == index[module]:
            component = []
            while not component or component[-1] != module:
                component.append(stack.pop())
            if len(component) > 1:
                found.append(sorted(component))

    for module in sorted(graph.modules):
        if module not in index:
            visit(module)
    return found


def _with_packages(graph: grimp.ImportGraph) -> grimp.ImportGraph:
    """Importing ``a.b.c`` runs ``a.b``'s ``__init__`` first: an import of a module also imports its packages (those
    that are not the importer's own), which is how a package's ``__init__`` can close a cycle."""
    for importer in sorted(graph.modules):
        for imported in sorted(graph.find_modules_directly_imported_by(importer)):
            package = imported.rpartition(".")[0]
            while package and not (importer + ".").startswith(package + ".") and package in graph.modules:
                if not graph.direct_import_exists(importer=importer, imported=package):
                    graph.add_import(importer=importer, imported=package, line_number=0,
                                     line_contents=f"(implicit: the package of {imported})")
                package = package.rpartition(".")[0]
    return graph


def test_no_import_cycles():
    """Every import counts, a function's lazy one and a package's ``__init__`` too."""
    graph = _with_packages(grimp.build_graph("ropelab", "tasks", cache_dir=None))
    cycles = _cycles(graph)
    lines = [f"{a} -> {b} (l.{d['line_number']})" for cycle in cycles for a in cycle for b in cycle
             if graph.direct_import_exists(importer=a, imported=b)
             for d in graph.get_import_details(importer=a, imported=b)[:1]]
    assert not cycles, "import cycles:\n" + "\n".join(lines)
