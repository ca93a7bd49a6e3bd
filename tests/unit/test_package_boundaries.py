"""What lives outside the package stays outside (issue 34): aclarena/ imports none of the repository's
tools, experiments or benchmarks; store/ reads the version without importing the top package; the
scripts use public names only and never patch sys.path."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = ("benchmarks", "experiments", "tools")


def _imports(path: Path) -> list[tuple[str, list[str]]]:
    """``(module, names)`` of every absolute import in ``path`` (``import x`` gives ``(x, [])``)."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out += [(a.name, []) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append((node.module, [a.name for a in node.names]))
    return out


def test_the_package_imports_no_repository_script():
    bad = [f"{p.relative_to(REPO)}: {m}" for p in (REPO / "aclarena").rglob("*.py")
           for m, _ in _imports(p) if m.split(".")[0] in SCRIPTS]
    assert not bad, bad
    assert not (REPO / "aclarena" / "docs_results.py").exists()


def test_store_reads_the_version_module_not_the_top_package():
    from aclarena import __version__
    from aclarena._version import __version__ as direct

    assert __version__ == direct
    bad = [f"{p.relative_to(REPO)}: from aclarena import {', '.join(names)}"
           for p in (REPO / "aclarena" / "store").rglob("*.py")
           for m, names in _imports(p) if m == "aclarena" and any(n != "jsonl" for n in names)]
    assert not bad, bad


def test_scripts_use_public_names_and_leave_sys_path_alone():
    private, patched = [], []
    for folder in SCRIPTS:
        for p in sorted((REPO / folder).glob("*.py")):
            for m, names in _imports(p):
                if m.startswith("aclarena"):
                    private += [f"{p.relative_to(REPO)}: {m}.{n}" for n in names if n.startswith("_")]
                    private += [f"{p.relative_to(REPO)}: {m}" for part in m.split(".") if part.startswith("_")]
            for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Attribute) and ast.unparse(node).startswith("sys.path."):
                    patched.append(f"{p.relative_to(REPO)}:{node.lineno}")
    assert not private, private
    assert not patched, patched
    assert (REPO / "experiments" / "README.md").is_file()


def test_the_dashboard_reads_findings_as_strict_json_without_the_tool(tmp_path):
    from aclarena.dashboard.findings import FILE, load_findings

    (tmp_path / FILE).write_text('{"rows": [], "x": NaN}', encoding="utf-8")
    data, err = load_findings(tmp_path)
    assert data is None and err is not None and "NaN is not strict JSON" in err and "\n" not in err
    (tmp_path / FILE).write_text('{"rows": [{"finding": "f"}]}', encoding="utf-8")
    assert load_findings(tmp_path) == ({"rows": [{"finding": "f"}]}, None)
