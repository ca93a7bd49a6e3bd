"""Hub ids resolve from the local Hugging Face cache only: an id not in the cache fails at once (no retries over
the network), a cached one is inspected and loads offline.

Each test failed on the code before its fix (issue 33, checked against main at 2f42103 / a7087bc)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from reliability_helpers import VERB_ARGV, checkpoint_rows, fill, one_line, seed_store


def _as_hub_id(run: Path, hub_id: str = "someorg/somemodel") -> None:
    text = (run / "aclarena.toml").read_text().replace('path = "checkpoints/seq-math"', f'path = "{hub_id}"')
    (run / "aclarena.toml").write_text(text)


@pytest.fixture()
def hf_cache(tmp_path, monkeypatch) -> Path:
    """An empty Hugging Face cache this test controls, and no network (HF_HUB_OFFLINE=1)."""
    import huggingface_hub.constants as constants

    cache = tmp_path / "hf-cache"
    cache.mkdir()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    return cache


def test_a_hub_id_not_in_the_cache_fails_at_once(fixture_run, tmp_path, cli, hf_cache):
    """Before: `checkpoints` said loadable, and a verb retried for 30 s with 23 retry lines."""
    seed_store(fixture_run)
    _as_hub_id(fixture_run)
    row = checkpoint_rows(cli, fixture_run)["seq-math"]
    assert row["loadable"] is False and "not in the local Hugging Face cache" in row["problem"], row
    t0 = time.perf_counter()
    code, _, err = cli(*fill(VERB_ARGV["tokens"], fixture_run, tmp_path))
    assert code == 1, err
    assert "hf download someorg/somemodel" in one_line(err, "tokens")
    assert time.perf_counter() - t0 < 20


def test_a_cached_hub_id_is_inspected_and_loads(fixture_run, cli, hf_cache):
    """Real users' cached ids still work: the snapshot is inspected like a folder (a lying config in it is
    refused) and the model loads from the cache with no network."""
    import shutil

    from aclarena.models.loading import load_model
    from aclarena.store.manifest import load_manifest

    rev = "0123456789abcdef0123456789abcdef01234567"
    repo = hf_cache / "models--someorg--somemodel"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(rev)
    shutil.copytree(fixture_run / "checkpoints" / "seq-math", repo / "snapshots" / rev)
    _as_hub_id(fixture_run)
    row = checkpoint_rows(cli, fixture_run)["seq-math"]
    assert row["loadable"] is True and row["source"] == "hub" and row["parameters"] == 131456, row
    model = load_model("seq-math", load_manifest(fixture_run), fixture_run)
    assert sum(p.numel() for p in model.parameters()) > 0
    cfg = repo / "snapshots" / rev / "config.json"
    cfg.write_text(json.dumps(json.loads(cfg.read_text()) | {"vocab_size": 600}))
    row = checkpoint_rows(cli, fixture_run)["seq-math"]
    assert row["loadable"] is False and "`vocab_size` is 600" in row["problem"], row
