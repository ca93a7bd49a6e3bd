"""Issue 49's display defects: a relative displacement of 3.69e-4 printed as 0.0004, signatures' columns
mixing fixed and scientific notation, report.html and aclarena.toml written 0600 (mkstemp's mode)."""

from __future__ import annotations

import os
import stat
from types import SimpleNamespace

from aclarena.cli._common import fmt_share, fmt_sig


def test_significant_digits_and_shares():
    assert fmt_sig(3.69e-4) == "0.000369" and fmt_sig(0.5) == "0.5" and fmt_sig(1.234e-6) == "1.23e-06"
    assert fmt_share(4e-4) == "0.000" and fmt_share(0.0123) == "0.012" and fmt_share(None) == "-"


def test_signatures_columns_hold_one_format_each(capsys):
    from aclarena.cli.signatures import _print
    from aclarena.results.signatures import MEASURES

    def row(update, small):
        r = {"update": update, "kind": "rl", "domain": "math", "n_sequences": 10, "high_share": 0.06,
             "first_k_share": 0.2}
        for m in MEASURES:
            v = 4e-4 if small else 0.25
            r[m], r[m + "_low"], r[m + "_high"] = v, v / 2, v * 2
        return r

    result = SimpleNamespace(settings={"first_k": 12, "high": "q=0.06", "level": 0.95, "n_boot": 200, "eps": 0.05},
                             rows=[row("a", True), row("b", False)])
    _print(result)
    out = capsys.readouterr().out
    a = next(ln for ln in out.splitlines() if ln.split()[:1] == ["a"] or "│ a " in ln)
    assert "0.000 [0.000, 0.001]" in a  # a share: fixed decimals, never 4.00e-04
    assert "0.0004 [0.0002, 0.0008]" in a  # the KL mean: significant digits
    assert "e-0" not in out


def test_published_files_are_readable_like_any_other(tmp_path):
    from aclarena.figures import _write_atomic
    from aclarena.store.manifest import Manifest, write_manifest

    mask = os.umask(0o022)
    try:
        _write_atomic(tmp_path / "report.html", b"<html></html>")
        write_manifest(Manifest(name="m"), tmp_path)
    finally:
        os.umask(mask)
    for name in ("report.html", "aclarena.toml"):
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == 0o644, name
