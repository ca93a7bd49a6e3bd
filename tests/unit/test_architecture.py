"""The import rules of design.md, read from the source: no import cycle, nothing outside cli/ imports cli/,
verbs do not import verbs, every import points down design.md's package table (its "may import" column),
diagnostics/ imports neither h5py nor transformers, store/ never imports torch (not even through the
aclarena modules it imports)."""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "aclarena"


def _modules() -> dict[str, Path]:
    out = {}
    for p in PACKAGE.rglob("*.py"):
        parts = p.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = p
    return out


@functools.cache
def _parse(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"))


def _imports(path: Path, *, type_checking: bool = False) -> list[str]:
    """Every module named by an import statement (module- or function-level); those under ``if TYPE_CHECKING``
    only with ``type_checking``."""
    tree = _parse(path)
    skip: set[int] = set()
    for node in ast.walk(tree):
        if not type_checking and isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip.update(id(n) for n in ast.walk(node))
    names = []
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names += [f"{node.module}.{a.name}" for a in node.names] + [node.module]
    return names


@functools.cache
def _graph(type_checking: bool = False) -> dict[str, set[str]]:
    mods = _modules()

    def resolve(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {m: set() for m in mods}
    for m, p in mods.items():
        for name in _imports(p, type_checking=type_checking):
            if name.startswith("aclarena"):
                target = resolve(name)
                if target and target != m and not m.startswith(target + "."):  # a parent package is no edge
                    graph[m].add(target)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_cycle():
    assert _cycles(dict(_graph())) == []


def _package(module: str) -> str:
    """The subpackage a module belongs to (``aclarena.train`` for ``aclarena.train.config``)."""
    return ".".join(module.split(".")[:2])


def package_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The edges of ``graph`` that stay inside one subpackage of aclarena."""
    return {m: {t for t in deps if _package(t) == _package(m) and t.count(".") >= 2}
            for m, deps in graph.items() if m.count(".") >= 2}


def test_package_graph_sees_a_circle_hidden_behind_type_checking(tmp_path):
    # the knot train/ once held: config -> monitor at call time, monitor -> config only for type hints
    (tmp_path / "config.py").write_text("def load():\n    from aclarena.train.monitor import parse\n")
    (tmp_path / "monitor.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                         "    from aclarena.train.config import Config\n")
    found = {f"aclarena.train.{p.stem}": {n for n in _imports(p, type_checking=True)
                                          if n in ("aclarena.train.config", "aclarena.train.monitor")}
             for p in sorted(tmp_path.glob("*.py"))}
    assert _cycles(package_graph(found)) == [["aclarena.train.config", "aclarena.train.monitor"]]
    assert _cycles(package_graph({m: {t for t in d if t != "aclarena.train.config"} for m, d in found.items()})) == []


def test_no_import_cycle_inside_a_package():
    # design.md: a TYPE_CHECKING import inside a package that closes a circle is a cycle in disguise; so is a
    # function-level one. Counted here: every import between two modules of one subpackage.
    cycles = _cycles(package_graph(_graph(type_checking=True)))
    assert cycles == [], f"import circles inside a package (TYPE_CHECKING and function-level imports counted): {cycles}"


def test_nothing_outside_cli_imports_cli():
    # `python -m aclarena` is the command line's entry point
    offenders = sorted(m for m, deps in _graph().items() if not m.startswith("aclarena.cli") and m != "aclarena.__main__"
                       and any(d == "aclarena.cli" or d.startswith("aclarena.cli.") for d in deps))
    assert offenders == []


def test_layer_rules():
    mods = _modules()
    bad = []
    for m, p in mods.items():
        imported = {n.split(".")[0] for n in _imports(p)}
        if m.startswith("aclarena.diagnostics") and imported & {"h5py", "transformers"}:
            bad.append(f"{m} imports {sorted(imported & {'h5py', 'transformers'})}")
        if m.startswith("aclarena.store") and "torch" in imported:
            bad.append(f"{m} imports torch")
    assert bad == []


# --- the layer order of design.md ----------------------------------------------------------------------------

# design.md's package table, "may import" column: each layer and the layers it may import. A row that holds
# two folders (train/consolidate, dashboard/figures) is one layer: its folders may import each other (the
# cycle test above keeps that one-way). Everything else points up and is an error.
MAY_IMPORT: dict[str, frozenset[str]] = {
    "cli": frozenset({"analysis", "train", "consolidate", "probes", "envs", "models", "dashboard", "figures", "results",
                      "store", "diagnostics"}),
    "analysis": frozenset({"train", "consolidate", "probes", "envs", "models", "dashboard", "figures", "results",
                           "store", "diagnostics"}),  # "all below"
    "train": frozenset({"consolidate", "probes", "envs", "models", "dashboard", "figures", "results", "store",
                        "diagnostics"}),
    "consolidate": frozenset({"train", "probes", "envs", "models", "dashboard", "figures", "results", "store",
                              "diagnostics"}),
    "probes": frozenset({"models", "diagnostics", "results", "store"}),
    "envs": frozenset({"models", "results", "store"}),
    "models": frozenset({"diagnostics", "results", "store"}),  # diagnostics for its types
    "dashboard": frozenset({"figures", "results", "store", "diagnostics"}),
    "figures": frozenset({"dashboard", "results", "store", "diagnostics"}),
    # one module per stored result type, between the store and everything that makes or reads results, and the
    # computation on stored results that figures and the dashboard need (the capability matrix, the comparison):
    # like store/, it may use the torch-free maths of diagnostics/ (test_store_and_results_never_reach_torch)
    "results": frozenset({"store", "diagnostics"}),
    # the table names numpy and h5py (never torch) for store/; diagnostics/ is the one layer below it, and what
    # store/ takes from it must stay torch-free (test_store_never_reaches_torch)
    "store": frozenset({"diagnostics"}),
    "diagnostics": frozenset(),
}
# Top-level modules every layer may use (below the CLI, design.md): errors, console helpers, the
# data-parallel world, strict JSON lines, the CPU kernel pin, and the version (its own module, issue 34).
HELPERS = frozenset({"aclarena.errors", "aclarena.progress", "aclarena.distributed", "aclarena.jsonl",
                     "aclarena.reproducibility", "aclarena._version", "aclarena.version"})
# The arrows that still point up, each with why: (importer regex, target regex, why). None remain; a new one
# needs its reason here, and test_known_upward_arrows_still_exist drops it once no import needs it.
KNOWN_UPWARD: tuple[tuple[str, str, str], ...] = ()


def _targets(path: Path, mods: dict[str, Path]) -> list[tuple[str, int]]:
    """(aclarena module imported, line) for every import statement of ``path`` (module- or function-level),
    except under ``if TYPE_CHECKING``; ``from aclarena import x`` is the module ``aclarena.x`` when there is
    one, else the package ``aclarena`` itself."""
    tree = _parse(path)
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip.update(id(n) for n in ast.walk(node))

    def resolve(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    out = []
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in mods else node.module
                     for a in node.names]
        else:
            continue
        for name in names:
            if name == "aclarena" or name.startswith("aclarena."):
                target = resolve(name)
                if target is not None:
                    out.append((target, node.lineno))
    return out


def layer_of(module: str) -> str:
    """The design.md layer of an aclarena module: its subpackage, ``helpers`` for the top-level helper
    modules, ``api`` for the package itself (the curated API, the top), ``tool`` for anything else at the top."""
    if module == "aclarena":
        return "api"
    if module in HELPERS:
        return "helpers"
    part = module.split(".")[1]
    return part if part in MAY_IMPORT else "tool"


def upward(importer: str, target: str) -> str | None:
    """Why ``importer`` may not import ``target`` (design.md), or None when it may."""
    src, dst = layer_of(importer), layer_of(target)
    if src in ("api", "tool", "cli"):
        return None  # the curated API, the entry point and the verbs may import everything (design.md)
    if dst == "helpers" or src == dst:
        return None
    if src == "helpers":
        return "the top-level helpers import only each other"
    allowed = MAY_IMPORT.get(src, frozenset())
    if dst in allowed:
        return None
    return f"{src}/ may import {', '.join(sorted(allowed)) or 'no other aclarena layer'} (design.md's package table)"


def layer_violations(edges: list[tuple[str, str, str]]) -> list[str]:
    """One line per (importer, target, where) that points up and is not a known, named exception."""
    bad = []
    for importer, target, where in edges:
        why = upward(importer, target)
        if why is None or any(re.fullmatch(a, importer) and re.fullmatch(b, target) for a, b, _ in KNOWN_UPWARD):
            continue
        bad.append(f"{where}: {importer} imports {target} ({layer_of(importer)} -> {layer_of(target)}), but {why}")
    return bad


@functools.cache
def _edges() -> list[tuple[str, str, str]]:
    mods = _modules()
    out = []
    for m, p in sorted(mods.items()):
        for target, line in _targets(p, mods):
            if target != m and not m.startswith(target + ".") or target == "aclarena":
                out.append((m, target, f"{p.relative_to(PACKAGE.parent)}:{line}"))
    return [e for e in out if not (e[1] == "aclarena" and e[0] in ("aclarena", "aclarena.__main__"))]


def test_layer_checker_names_an_upward_import():
    edges = [("aclarena.store.results", "aclarena.analysis.tokens", "aclarena/store/results.py:3"),
             ("aclarena.figures.overview", "aclarena.models.loading", "aclarena/figures/overview.py:9"),
             ("aclarena.analysis.tokens", "aclarena.store.results", "aclarena/analysis/tokens.py:5"),
             ("aclarena.diagnostics.bootstrap", "aclarena.errors", "aclarena/diagnostics/bootstrap.py:4"),
             ("aclarena.models.loading", "aclarena", "aclarena/models/loading.py:7")]
    assert layer_violations(edges) == [
        "aclarena/store/results.py:3: aclarena.store.results imports aclarena.analysis.tokens (store -> analysis), "
        "but store/ may import diagnostics (design.md's package table)",
        "aclarena/figures/overview.py:9: aclarena.figures.overview imports aclarena.models.loading (figures -> models), "
        "but figures/ may import dashboard, diagnostics, results, store (design.md's package table)",
        "aclarena/models/loading.py:7: aclarena.models.loading imports aclarena (models -> api), but models/ may import "
        "diagnostics, results, store (design.md's package table)",
    ]


def test_every_package_of_the_table_has_its_rule():
    packages = {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert packages == set(MAY_IMPORT), "a new subpackage needs its row in design.md and in MAY_IMPORT"
    tops = {p.stem for p in PACKAGE.glob("*.py")} - {"__init__", "__main__"}
    assert {f"aclarena.{t}" for t in tops} - HELPERS == set(), \
        "a new top-level module is a helper (add it to HELPERS) or belongs in a subpackage"


def test_imports_point_down_the_layer_table():
    bad = layer_violations(_edges())
    assert bad == [], "imports that point up design.md's package table:\n" + "\n".join(bad)


def test_known_upward_arrows_still_exist():
    # an allowance that no import needs any more is dropped, so that it cannot hide a new arrow
    edges = _edges()
    unused = [why for a, b, why in KNOWN_UPWARD
              if not any(re.fullmatch(a, i) and re.fullmatch(b, t) and upward(i, t) for i, t, _ in edges)]
    assert unused == [], f"drop these allowances from KNOWN_UPWARD: {unused}"


def test_verbs_do_not_import_verbs():
    from aclarena.cli import VERBS

    verbs = {f"aclarena.cli.{v.replace('-', '_')}" for v in VERBS}
    bad = [f"{where}: verb {m} imports {t}; shared pieces of the verbs go in aclarena.cli._common, work in the "
           "analysis layer" for m, t, where in _edges()
           if m in verbs and (t == "aclarena.cli" or t.startswith("aclarena.cli.")) and t != "aclarena.cli._common"]
    assert bad == [], "\n".join(bad)


@pytest.mark.parametrize("layer", ["store", "results"])
def test_store_and_results_never_reach_torch(layer):
    mods = _modules()
    graph = _graph()
    reached: set[str] = set()
    todo = [m for m in mods if m.startswith(f"aclarena.{layer}")]
    while todo:
        m = todo.pop()
        if m not in reached:
            reached.add(m)
            todo += graph[m]
    torch_users = sorted(m for m in reached if "torch" in {n.split(".")[0] for n in _imports(mods[m])})
    assert torch_users == [], f"{layer}/ reaches torch through {torch_users}"


def test_the_contributors_layer_table_is_the_tested_one():
    """docs/architecture.md's table names every folder of the package once, with exactly the layers MAY_IMPORT
    lets it import (so the contributors' page cannot drift from the rule this file enforces)."""
    doc = (Path(__file__).resolve().parents[2] / "docs" / "architecture.md").read_text(encoding="utf-8")
    rows = {}
    for line in doc.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0].startswith("`") and cells[0].endswith("/`"):
            rows[cells[0].strip("`/")] = frozenset() if cells[2] == "(none)" else frozenset(
                c.strip() for c in cells[2].split(","))
    folders = {p.name for p in (Path(__file__).resolve().parents[2] / "aclarena").iterdir()
               if p.is_dir() and (p / "__init__.py").exists()}
    assert set(rows) == folders == set(MAY_IMPORT)
    assert {k: sorted(v) for k, v in rows.items()} == {k: sorted(v) for k, v in MAY_IMPORT.items()}
