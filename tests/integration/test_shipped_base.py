"""The mini base shipped inside the package: it loads, matches its recorded fingerprint, imitates
each domain's expert after one demonstration, and a modified copy stops `train` and `demo` with one line."""

from __future__ import annotations

import shutil

import pytest

from aclarena.models import shipped

EXAMPLES = shipped.SHIPPED_DIR.parents[2] / "examples"


def test_shipped_base_loads_matches_its_fingerprint_and_imitates_every_domain():
    from aclarena.envs.demonstration import DOMAINS, one_shot_scores
    from aclarena.train.phases import load_start

    folder = shipped.shipped_base()  # raises on any missing or modified file
    rec = shipped.recorded()
    assert shipped.combined({n: shipped.sha256(folder / n) for n in rec["files"]}) == rec["fingerprint"]
    assert (folder / shipped.CARD_FILE).read_text().count(rec["fingerprint"]) >= 1  # the model card names it
    total = sum((folder / n).stat().st_size for n in rec["files"])
    assert total < 50 * 2**20
    model, tok = load_start(str(folder))
    assert 2e6 < sum(p.numel() for p in model.parameters()) < 40e6
    scores = one_shot_scores(model, tok, n=8)
    assert set(scores) == set(DOMAINS)
    assert all(v > 0 for v in scores.values()), scores


@pytest.fixture()
def modified_base(tmp_path, monkeypatch):
    copy = tmp_path / "mini_base"
    shutil.copytree(shipped.SHIPPED_DIR, copy)
    raw = bytearray((copy / "model.safetensors").read_bytes())
    raw[-1] ^= 1
    (copy / "model.safetensors").write_bytes(bytes(raw))
    monkeypatch.setattr(shipped, "SHIPPED_DIR", copy)
    return copy


@pytest.mark.parametrize("verb", ["train", "demo"])
def test_modified_shipped_base_is_one_line_and_nothing_is_pretrained(cli, tmp_path, modified_base, verb):
    out = tmp_path / "run"
    argv = ["train", "--config", str(EXAMPLES / "mini.toml"), "--out", str(out)] if verb == "train" \
        else ["demo", "--out", str(out)]
    code, _, err = cli(*argv)
    assert code == 1, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert str(modified_base / "model.safetensors") in lines[0]
    assert "aclarena-diag train --config examples/mini-base.toml" in lines[0]
    assert not (out / "checkpoints" / "base").exists()
