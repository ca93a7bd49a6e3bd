# %% [markdown]
# # aclarena from Python
#
# A percent-script: open it as a notebook (VS Code, Jupytext) or run it with
# `python examples/python_api.py [FOLDER]`. It builds a tiny run (a base, two later stages and an
# oracle, random models sized for a small tokenizer, so it runs on a laptop CPU in seconds),
# then uses the curated API of docs/python-api.md on it. Point `acl.Run` at your own run
# folder instead to analyse real checkpoints.

# %%
import copy
import json
import sys
import tempfile
from pathlib import Path

import torch

import aclarena as acl
from aclarena.analysis.probe import make_probe
from aclarena.models.tiny import build_model, save_checkpoint, tiny_config, train_tokenizer
from aclarena.results.probes import write_probe_set
from aclarena.store import CheckpointSpec, Manifest, write_manifest

root = Path(sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp()) / "run"
texts = [f"{a} + {b} = {a + b}. the answer is {a + b}." for a in range(40) for b in range(10)]
tokenizer = train_tokenizer(texts, vocab_size=300)


def drifted(model, scale, seed):
    """A copy of ``model`` with Gaussian noise of std ``scale`` on every weight."""
    out = copy.deepcopy(model)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in out.parameters():
            p.add_(scale * torch.randn(p.shape, generator=g))
    return out


base = build_model(tiny_config(tokenizer), seed=0)
stage_math = drifted(base, 0.02, seed=1)
stage_search = drifted(stage_math, 0.04, seed=2)
oracle_math = drifted(base, 0.02, seed=3)
manifest = Manifest(name="python-api", base="base")
for name, model, spec in (
    ("base", base, dict(kind="base")),
    ("seq-math", stage_math, dict(kind="stage", domain="math", phase="rl", parent="base")),
    ("seq-search", stage_search, dict(kind="stage", domain="search", phase="sft", parent="seq-math")),
    ("oracle-math", oracle_math, dict(kind="oracle", domain="math", parent="base")),
):
    save_checkpoint(model, tokenizer, root / "checkpoints" / name)
    manifest.add(CheckpointSpec(name, f"checkpoints/{name}", **spec))
write_manifest(manifest, root)

# %% [markdown]
# ## The run and its checkpoints

# %%
run = acl.Run(root)
print(run)
print(run.checkpoints()[["name", "kind", "parent", "parameters", "loadable"]])

# %% [markdown]
# ## Task vectors and displacement (streamed from safetensors, cached in results.h5)

# %%
vec = run.vectors()
print(vec.cosines().round(3))
disp = run.displacement()
print(disp.to_pandas()[["checkpoint", "parent", "phase", "norm", "rel"]])

# %% [markdown]
# ## Token drift on a frozen probe set of seq-math

# %%
prompts = root / "prompts.jsonl"
prompts.write_text("".join(json.dumps({"prompt": f"{a} + {b} ="}) + "\n" for a, b in ((2, 3), (7, 1), (4, 4))))
# what `aclarena-diag probe --ref seq-math --prompts prompts.jsonl` does
write_probe_set(run.store, make_probe(root, run.manifest, "seq-math", "seq-math", prompts_file=str(prompts),
                                      show_progress=False))
drift = run.tokens(ref="seq-math")
print(drift.summary()[["checkpoint", "kl_mean", "kl_share_high", "flip_rate_high"]])
pos = drift.positions("seq-search")
print(pos.groupby("high")["kl"].mean())

# %% [markdown]
# ## The same drift on the in-memory models, no run folder

# %%
mem = acl.token_drift(stage_math, stage_search, ["2 + 3 =", "7 + 1 =", "4 + 4 ="], tokenizer=tokenizer)
print("in-memory KL mean", mem.summary.kl_mean)
print(acl.task_vector_cosines([root / "checkpoints" / "seq-math", root / "checkpoints" / "oracle-math"],
                              base=root / "checkpoints" / "base"))
