"""The import rules of design.md, read from the source: no import cycle, nothing outside cli/ imports cli/,
diagnostics/ imports neither h5py nor transformers, store/ never imports torch."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "aclarena"


def _modules() -> dict[str, Path]:
    out = {}
    for p in PACKAGE.rglob("*.py"):
        parts = p.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = p
    return out


def _imports(path: Path) -> list[str]:
    """Every module named by an import statement (module- or function-level), except under ``if TYPE_CHECKING``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
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
def _graph() -> dict[str, set[str]]:
    mods = _modules()

    def resolve(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {m: set() for m in mods}
    for m, p in mods.items():
        for name in _imports(p):
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
