"""Rewrites keep a file's mode (the manifest, results.h5), and files written new get a plain one.

Each test failed on the code before its fix (issue 43, checked against its branch at 3c35d94)."""

from __future__ import annotations

import os


def test_rewrites_keep_the_files_modes(fixture_run, cli):
    from reliability_helpers import seed_store

    from aclarena.store import ResultsStore, load_manifest, write_manifest

    seed_store(fixture_run)
    store, toml = fixture_run / "results.h5", fixture_run / "aclarena.toml"
    store.chmod(0o600)
    toml.chmod(0o644)
    ResultsStore(fixture_run).write("another/result", {"x": [1]}, result_type="sentinel")
    write_manifest(load_manifest(fixture_run), fixture_run)
    assert (store.stat().st_mode & 0o777, toml.stat().st_mode & 0o777) == (0o600, 0o644)


def test_export_html_report_gets_a_plain_files_mode(fixture_run, tmp_path, cli):
    """Written through mkstemp, the report was 0600 (unreadable to a web server or a colleague)."""
    from reliability_helpers import seed_store

    seed_store(fixture_run)
    old = os.umask(0o022)
    try:
        code, _, err = cli("export", "--format", "html", "--out", str(tmp_path / "figs"), "--run", str(fixture_run))
    finally:
        os.umask(old)
    assert code == 0, err
    (report,) = (tmp_path / "figs").glob("*.html")
    assert report.stat().st_mode & 0o777 == 0o644
