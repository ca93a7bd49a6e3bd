"""The mini base shipped inside the package: it loads and matches its recorded fingerprint, a modified
copy stops `train` and `demo` with one line, and (not yet met) it imitates each domain's expert after
one demonstration."""

from __future__ import annotations

import shutil

import pytest

from aclarena.models import shipped

EXAMPLES = shipped.SHIPPED_DIR.parents[2] / "examples"


def test_shipped_base_loads_and_matches_its_fingerprint():
    from aclarena.train.phases import load_start

    folder = shipped.shipped_base()  # raises on any missing or modified file
    rec = shipped.recorded()
    assert shipped.combined({n: shipped.sha256(folder / n) for n in rec["files"]}) == rec["fingerprint"]
    assert rec["fingerprint"] in (folder / shipped.CARD_FILE).read_text()  # the model card names it
    assert sum((folder / n).stat().st_size for n in rec["files"]) < 50 * 2**20
    model, tok = load_start(str(folder))
    assert 2e6 < sum(p.numel() for p in model.parameters()) < 40e6
    assert tok.chat_template and "{% generation %}" in tok.chat_template


# The bar for a base that can learn the arena. The shipped base (6,218 pretraining steps on
# 12.7M tokens; it copies, 0.93 of a reply's tokens teacher-forced) does not reach it: measured 0 on
# every domain (n = 25 each, its model card; n = 50 each on 2026-12-02). Strict: the day a shipped
# base passes, this xfail fails and the marker must go.
@pytest.mark.slow  # 4 domains x 8 episodes; 26 s beside a training run (508 s on a loaded machine)
@pytest.mark.xfail(strict=True, reason="the shipped base scores 0 one-shot on every domain (docs/training.md)")
def test_shipped_base_imitates_every_domain_after_one_demonstration():
    from aclarena.envs.demonstration import DOMAINS, one_shot_scores
    from aclarena.train.phases import load_start

    model, tok = load_start(str(shipped.shipped_base()))
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
