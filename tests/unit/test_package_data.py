"""Every non-Python file the package reads at run time is shipped in the wheel: pyproject's package-data
patterns cover the dashboard's assets (its clientside callbacks and click handlers are .js files; the
wheel carried none of them before, so a pip-installed dashboard lost token clicks and downloads)."""

from __future__ import annotations

import tomllib
from pathlib import Path, PurePosixPath

ROOT = Path(__file__).resolve().parents[2]


def _shipped(rel: str, patterns: list[str]) -> bool:
    path = PurePosixPath(rel)
    # setuptools' package-data globs: "**/" matches any depth, including none
    return any(path.match(p) or path.match(p.replace("**/", "")) for p in patterns)


def test_dashboard_assets_are_package_data():
    patterns = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["aclarena"]
    assets = sorted(p for p in (ROOT / "aclarena" / "dashboard" / "assets").rglob("*") if p.is_file())
    assert any(p.suffix == ".js" for p in assets)
    missing = [str(p.relative_to(ROOT / "aclarena")) for p in assets
               if not _shipped(str(p.relative_to(ROOT / "aclarena")), patterns)]
    assert missing == [], f"add a package-data pattern for {missing} in pyproject.toml"
