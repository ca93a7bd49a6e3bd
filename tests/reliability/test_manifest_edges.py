"""Run-manifest edges (issue 15): names ending in a newline, paths with control characters or
undecodable bytes through `init`, and validation time linear in the depth of a chain."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from aclarena.errors import ManifestError
from aclarena.store.manifest import CheckpointSpec, Manifest, load_manifest, parse_manifest


@pytest.mark.parametrize("name", ["seq-math\n", "a\n", "base\r\n", "x\x00", "\nx"])
def test_names_ending_in_a_newline_are_refused(name):
    with pytest.raises(ManifestError, match="not allowed"):
        CheckpointSpec(name=name, path="p")


def test_probe_name_ending_in_a_newline_is_refused(fixture_run, cli):
    code, _, err = cli("probe", "--ref", "seq-math", "--name", "p\n", "--prompts", "x.jsonl", "--run", str(fixture_run))
    assert code == 1 and "probe name 'p\\n' is not allowed" in err, err


def _chain(n: int) -> str:
    lines = ['[run]\nname = "deep"\nbase = "c0"\n', '[checkpoints.c0]\npath = "c0"\nkind = "base"\n']
    for i in range(1, n):
        lines.append(f'[checkpoints.c{i}]\npath = "c{i}"\nkind = "stage"\nparent = "c{i - 1}"\n')
    return "\n".join(lines)


def _cost(n: int) -> float:
    text = _chain(n)
    best = float("inf")
    for _ in range(3):
        t = time.perf_counter()
        m = parse_manifest(text)
        m.descendants("c0")
        best = min(best, time.perf_counter() - t)
    return best


def test_validation_is_linear_in_chain_depth():
    """2,000 checkpoints in one chain cost about 10x what 200 cost (linear); the cubic walk cost 1000x.
    The bound (40x) is generous for timing noise on a shared machine yet far below quadratic (100x)."""
    small, large = _cost(200), _cost(2000)
    assert large < 40 * small, (small, large)


def test_a_cycle_in_a_long_chain_is_still_found():
    text = _chain(500).replace('[checkpoints.c0]\npath = "c0"\nkind = "base"\n',
                               '[checkpoints.c0]\npath = "c0"\nkind = "base"\nparent = "c499"\n')
    with pytest.raises(ManifestError, match="parent cycle in the manifest: c0 -> c499 -> .* -> c0"):
        parse_manifest(text)


@pytest.mark.parametrize("path", ["ckpt\x7fdir", "ckpt\x01dir", "tab\tand\"quote\\", "line\u2028sep"],
                         ids=["DEL", "SOH", "tab-quote-backslash", "U+2028"])
def test_init_with_control_characters_writes_a_manifest_every_verb_reads(tmp_path, cli, path):
    run = tmp_path / "run"
    code, _, err = cli("init", "--run", str(run), f"base={path}", "--json", "--allow-missing")
    assert code == 0, err
    m = load_manifest(run)
    # init reads a PATH from the current folder and writes it absolute outside the run folder (issue 49)
    assert m.resolve("base").path == str(Path(path).resolve())
    assert [p.name for p in run.iterdir()] == ["aclarena.toml"]


def test_init_with_undecodable_bytes_is_one_line_and_leaves_nothing(tmp_path, cli):
    run = tmp_path / "run"
    undecodable = b"ckpt\xff\xfe".decode("utf-8", "surrogateescape")  # how Python hands such a file name over
    code, _, err = cli("init", "--run", str(run), f"base={undecodable}", "--allow-missing")
    assert code == 1, err
    lines = [ln for ln in err.splitlines() if ln.startswith("aclarena-diag")]
    assert len(lines) == 1 and lines[0].startswith("aclarena-diag init: error: ") and "UTF-8" in lines[0], err
    assert not run.exists() or list(run.iterdir()) == []


def test_a_manifest_round_trips_through_toml_with_any_text(tmp_path):
    m = Manifest(name="r\x7f\x00\u2029", description="d\"\\\x1b")
    m.add(CheckpointSpec(name="base", path="p\x7f\n\x00", kind="base"))
    assert parse_manifest(m.to_toml()).resolve("base").path == "p\x7f\n\x00"
    assert parse_manifest(m.to_toml()).name == m.name
