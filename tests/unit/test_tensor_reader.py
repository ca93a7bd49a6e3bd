"""aclarena.models.tensors: aligned streaming of synthetic safetensors checkpoints (no model)."""

from __future__ import annotations

import json
import os

import pytest
import torch
from vectors_helpers import TINY_CONFIG, random_model, write_run

import aclarena.models.tensors as tensors_mod
from aclarena.errors import CheckpointError
from aclarena.models.checkpoint import inspect
from aclarena.models.tensors import TensorReader, read_lora
from aclarena.store.manifest import load_manifest


def _infos(run, names):
    m = load_manifest(run)
    return [inspect(m.resolve(n), m, run) for n in names]


def test_sharded_equals_single_and_each_file_read_once(tmp_path, monkeypatch):
    sd = {n: random_model(i, dtype=torch.bfloat16 if i == 1 else torch.float32) for i, n in enumerate(["base", "a", "b"])}
    single = write_run(tmp_path / "single", sd, {})
    sharded = write_run(tmp_path / "sharded", sd, {}, shards=3)
    reads: dict[str, list[tuple[int, int]]] = {}
    real = os.preadv

    def spy(fd, bufs, offset):
        n = real(fd, bufs, offset)
        reads.setdefault(os.readlink(f"/proc/self/fd/{fd}"), []).append((offset, n))
        return n

    monkeypatch.setattr(tensors_mod.os, "preadv", spy)
    with TensorReader(_infos(single, ["base", "a", "b"])) as r1, TensorReader(_infos(sharded, ["base", "a", "b"])) as r2:
        assert sorted(r1.names) == sorted(r2.names) == sorted(sd["base"])
        for name in r1.names:
            x1, x2 = r1.read(name), r2.read(name)
            for k, ck in enumerate(["base", "a", "b"]):
                assert x1[k].dtype == sd[ck][name].dtype
                torch.testing.assert_close(x1[k], sd[ck][name], rtol=0, atol=0)
                torch.testing.assert_close(x2[k], sd[ck][name], rtol=0, atol=0)
    # every data byte of every file read once, front to back
    files = [p for p in (tmp_path).rglob("*.safetensors")]
    assert len(reads) == len(files) == 3 + 9
    for path, spans in reads.items():
        offsets = [o for o, _ in spans]
        assert offsets == sorted(offsets), path
        assert all(a + n == b for (a, n), (b, _) in zip(spans, spans[1:], strict=False)), path
        with open(path, "rb") as f:
            header = int.from_bytes(f.read(8), "little")
        assert sum(n for _, n in spans) == os.path.getsize(path) - 8 - header


def test_chunks_cover_rows_and_reuse(tmp_path):
    sd = {n: random_model(i) for i, n in enumerate(["base", "a"])}
    run = write_run(tmp_path / "r", sd, {})
    with TensorReader(_infos(run, ["base", "a"])) as r:
        name = "model.embed_tokens.weight"
        parts = [(c.start, c.stop, [t.clone() for t in c.tensors]) for c in r.chunks(name, 50, reuse=True)]
        assert parts[0][:2] == (0, 3) and parts[-1][1] == r.rows(name) == 40
        for k, ck in enumerate(["base", "a"]):
            torch.testing.assert_close(torch.cat([p[2][k] for p in parts]), sd[ck][name])
        one = next(iter(r.chunks("model.norm.weight", 1)))
        assert one.tensors[0].shape == (1,)
        assert r.numel(name) == 640 and r.nbytes(name) == 2 * 640 * 4


def test_tied_head_counted_once(tmp_path):
    base = random_model(0)
    with_head = dict(base, **{"lm_head.weight": base["model.embed_tokens.weight"].clone()})
    run = write_run(tmp_path / "r", {"base": base, "a": with_head, "b": with_head}, {})
    with TensorReader(_infos(run, ["base", "a", "b"])) as r:
        assert "lm_head.weight" not in r.names and r.tied == ("lm_head.weight",)
    untied = dict(TINY_CONFIG, tie_word_embeddings=False)
    run2 = write_run(tmp_path / "r2", {"base": with_head, "a": with_head}, {}, configs={"base": untied, "a": untied})
    with TensorReader(_infos(run2, ["base", "a"])) as r:
        assert "lm_head.weight" in r.names and r.tied == ()
    run3 = write_run(tmp_path / "r3", {"base": base, "a": with_head}, {}, configs={"a": untied})
    with pytest.raises(CheckpointError, match=r"lm_head.weight is in 'a' but not in 'base'"):
        TensorReader(_infos(run3, ["base", "a"]))


def test_mismatches_are_one_line_errors(tmp_path):
    base = random_model(0)
    missing = {k: v for k, v in base.items() if k != "model.layers.1.mlp.up_proj.weight"}
    wide = random_model(1, width=12)
    run = write_run(tmp_path / "r", {"base": base, "missing": missing, "wide": wide, "other": base}, {},
                    configs={"other": {"architectures": ["OtherForCausalLM"]}})
    cases = [
        (["base", "missing"], "tensor model.layers.1.mlp.up_proj.weight is in 'base' but not in 'missing'"),
        (["missing", "base"], "tensor model.layers.1.mlp.up_proj.weight is in 'base' but not in 'missing'"),
        (["base", "wide"], "tensor model.embed_tokens.weight has shape [40, 16] in 'base' but [40, 12] in 'wide'"),
        (["base", "other"], "'base' (TinyForCausalLM) and 'other' (OtherForCausalLM) have different architectures"),
    ]
    for names, msg in cases:
        with pytest.raises(CheckpointError) as e:
            TensorReader(_infos(run, names))
        assert msg in str(e.value) and "\n" not in str(e.value)


def test_truncated_file_is_refused(tmp_path):
    run = write_run(tmp_path / "r", {"base": random_model(0), "a": random_model(1)}, {})
    f = run / "checkpoints" / "a" / "model.safetensors"
    f.write_bytes(f.read_bytes()[:-100])
    with pytest.raises(CheckpointError, match="truncated"):
        TensorReader(_infos(run, ["base", "a"]))


def _adapter(folder, tensors, **cfg):
    from safetensors.torch import save_file

    folder.mkdir(parents=True)
    save_file(tensors, str(folder / "adapter_model.safetensors"))
    (folder / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "r": 2, "lora_alpha": 4, **cfg}))


def test_read_lora_scaling_and_refusals(tmp_path):
    from aclarena.store.manifest import CheckpointSpec, write_manifest

    run = write_run(tmp_path / "r", {"base": random_model(0)}, {})
    pre = "base_model.model.model.layers.0"
    lora = {f"{pre}.self_attn.q_proj.lora_A.weight": torch.randn(2, 16), f"{pre}.self_attn.q_proj.lora_B.weight": torch.randn(16, 2),
            f"{pre}.mlp.up_proj.lora_A.weight": torch.randn(2, 16), f"{pre}.mlp.up_proj.lora_B.weight": torch.randn(32, 2)}
    m = load_manifest(run)
    variants = {
        "plain": ({}, {"q_proj": 2.0, "up_proj": 2.0}),
        "rs": ({"use_rslora": True}, {"q_proj": 4 / 2**0.5, "up_proj": 4 / 2**0.5}),
        "pat": ({"alpha_pattern": {"up_proj": 8}}, {"q_proj": 2.0, "up_proj": 4.0}),
    }
    for name, (cfg, _) in variants.items():
        _adapter(run / name, lora, **cfg)
        m.add(CheckpointSpec(name, name, kind="consolidated", on="base"))
    _adapter(run / "dora", lora, use_dora=True)
    m.add(CheckpointSpec("dora", "dora", on="base"))
    _adapter(run / "emb", {**lora, "base_model.model.model.embed_tokens.lora_embedding_A": torch.randn(2, 40)})
    m.add(CheckpointSpec("emb", "emb", on="base"))
    write_manifest(m, run)
    for name, (_, scales) in variants.items():
        f = read_lora(inspect(m.resolve(name), m, run))
        assert set(f) == {"model.layers.0.self_attn.q_proj.weight", "model.layers.0.mlp.up_proj.weight"}
        assert f["model.layers.0.self_attn.q_proj.weight"].scale == pytest.approx(scales["q_proj"])
        assert f["model.layers.0.mlp.up_proj.weight"].scale == pytest.approx(scales["up_proj"])
        assert f["model.layers.0.mlp.up_proj.weight"].shape == (32, 16)
    with pytest.raises(CheckpointError, match="DoRA"):
        read_lora(inspect(m.resolve("dora"), m, run))
    with pytest.raises(CheckpointError, match="not a LoRA A/B matrix"):
        read_lora(inspect(m.resolve("emb"), m, run))


def test_hub_and_adapter_refused_by_reader(tmp_path):
    from aclarena.store.manifest import CheckpointSpec, write_manifest

    run = write_run(tmp_path / "r", {"base": random_model(0)}, {})
    m = load_manifest(run)
    m.add(CheckpointSpec("hub", "someorg/somemodel"))
    write_manifest(m, run)
    with pytest.raises(CheckpointError, match="hub id"):
        TensorReader(_infos(run, ["base", "hub"]))


def test_stream_reads_ahead_in_order_and_stops_cleanly(tmp_path):
    import threading

    sd = {n: random_model(i) for i, n in enumerate(["base", "a", "b"])}
    sd["a"]["model.empty.weight"] = sd["b"]["model.empty.weight"] = sd["base"]["model.empty.weight"] = torch.zeros(0, 4)
    run = write_run(tmp_path / "r", sd, {})
    with TensorReader(_infos(run, ["base", "a", "b"])) as r:
        seen: dict[str, list[list[torch.Tensor]]] = {}
        order = []
        for chunk in r.stream(max_elements=37, prefetch=3):
            if not order or order[-1] != chunk.name:
                order.append(chunk.name)
            seen.setdefault(chunk.name, []).append([t.clone() for t in chunk.tensors])
        assert order == list(r.names)  # every tensor once, in read order, the empty one included
        for name, parts in seen.items():
            for k, ck in enumerate(["base", "a", "b"]):
                torch.testing.assert_close(torch.cat([p[k] for p in parts]).reshape(sd[ck][name].shape), sd[ck][name])
        # leaving early stops the reading thread
        for _ in r.stream(max_elements=8):
            break
        assert not any(t.name == "aclarena-tensor-reader" for t in threading.enumerate())
    # a read that fails in the background thread is raised to the caller
    with TensorReader(_infos(run, ["base", "a"])) as r:
        f = run / "checkpoints" / "a" / "model.safetensors"
        f.write_bytes(f.read_bytes()[:-200])
        with pytest.raises(CheckpointError, match="truncated"):
            for _ in r.stream(max_elements=64):
                pass
