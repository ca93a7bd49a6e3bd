"""The bad-input matrix of the reliability suite: every verb × the bad inputs the earlier issues list.

Each case damages a fresh copy of the fixture run (whose results.h5 already holds a result), runs
the verb, and expects exit 1, exactly one ``aclarena-diag VERB: error: ...`` line, no traceback,
and results.h5 byte-identical afterwards. docs/reliability.md shows this matrix.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

# the verbs and a valid command line for each (the damage makes it invalid)
VERB_ARGV: dict[str, list[str]] = {
    "checkpoints": ["checkpoints"],
    "probe": ["probe", "--ref", "seq-math", "--prompts", "{prompts}", "--max-new-tokens", "4"],
    "tokens": ["tokens", "--ref", "seq-math", "--against", "seq-search"],
    "eval": ["eval", "--checkpoints", "seq-math", "--suites", "math/id", "-n", "1", "--samples", "0"],
    "forgetting": ["forgetting"],
    "vectors": ["vectors"],
    "displacement": ["displacement"],
    "export": ["export", "--format", "html", "--out", "{tmp}/figs"],
}


def _manifest(run: Path) -> Path:
    return run / "aclarena.toml"


def garbled_manifest(run: Path) -> None:
    _manifest(run).write_text(_manifest(run).read_text() + "\n[checkpoints.broken\npath = 1\n")


def missing_manifest(run: Path) -> None:
    _manifest(run).unlink()


def parent_cycle(run: Path) -> None:
    text = _manifest(run).read_text()
    text = text.replace('[checkpoints.base]\npath = "checkpoints/base"\nkind = "base"',
                        '[checkpoints.base]\npath = "checkpoints/base"\nkind = "base"\nparent = "seq-search"')
    assert 'parent = "seq-search"' in text
    _manifest(run).write_text(text)


def duplicate_name(run: Path) -> None:
    _manifest(run).write_text(_manifest(run).read_text() + '\n[checkpoints.seq-math]\npath = "checkpoints/base"\n')


def missing_folder(run: Path) -> None:
    shutil.rmtree(run / "checkpoints" / "seq-math")


def no_weights(run: Path) -> None:
    for f in (run / "checkpoints" / "seq-math").glob("*.safetensors"):
        f.unlink()


def pickle_only(run: Path) -> None:
    import torch
    from safetensors.torch import load_file

    folder = run / "checkpoints" / "seq-math"
    for f in folder.glob("*.safetensors"):
        torch.save(load_file(f), folder / "pytorch_model.bin")
        f.unlink()


def _poison(run: Path, value: float, checkpoint: str = "seq-math") -> None:
    from safetensors.torch import load_file, save_file

    f = next((run / "checkpoints" / checkpoint).glob("*.safetensors"))
    tensors = load_file(f)
    name = next(k for k in tensors if k.endswith("mlp.down_proj.weight"))
    tensors[name][0, 0] = value
    save_file(tensors, f, metadata={"format": "pt"})


def nan_weights(run: Path) -> None:
    _poison(run, float("nan"))


def inf_weights(run: Path) -> None:
    _poison(run, float("-inf"))


def shape_mismatch(run: Path) -> None:
    from safetensors.torch import load_file, save_file

    f = next((run / "checkpoints" / "seq-math").glob("*.safetensors"))
    tensors = load_file(f)
    name = next(k for k in tensors if k.endswith("mlp.down_proj.weight"))
    tensors[name] = tensors[name][:, :-1].contiguous()
    save_file(tensors, f, metadata={"format": "pt"})


def corrupted_store(run: Path) -> None:
    (run / "results.h5").write_bytes(b"\x00garbage" * 200)


def truncated_store(run: Path) -> None:
    raw = (run / "results.h5").read_bytes()
    (run / "results.h5").write_bytes(raw[: len(raw) // 3])


def newer_store(run: Path) -> None:
    import h5py

    with h5py.File(run / "results.h5", "r+") as f:
        f.attrs["encoding-version"] = "2.0.0"


def seed_store(run: Path) -> None:
    """Put one finished result in the run's store, so that 'unchanged' means something."""
    from aclarena.store import ResultsStore

    ResultsStore(run).write("sentinel/result", {"x": np.arange(16)}, result_type="sentinel")


@dataclass(frozen=True)
class Damage:
    name: str
    issue: int | str
    apply: Callable[[Path], None]
    needle: str  # a fragment the one-line error must contain
    verbs: tuple[str, ...]  # the verbs this input reaches (`checkpoints` reports unloadable ones in its table, by design)


ALL = tuple(VERB_ARGV)
MODEL_VERBS = ("probe", "tokens", "vectors", "displacement")
# eval records an unloadable checkpoint as an error cell (issue 5) and exits 1: tested apart
STORE_VERBS = ("probe", "tokens", "eval", "forgetting", "vectors", "displacement", "export")

DAMAGES = (
    Damage("garbled manifest (TOML error)", 2, garbled_manifest, "line", ALL),
    Damage("missing manifest", 2, missing_manifest, "aclarena.toml", ALL),
    Damage("parent cycle", 2, parent_cycle, "cycle", ALL),
    Damage("duplicate checkpoint name", 2, duplicate_name, "seq-math", ALL),
    Damage("missing checkpoint folder", 2, missing_folder, "seq-math", MODEL_VERBS),
    Damage("folder without weights", 2, no_weights, "seq-math", MODEL_VERBS),
    Damage("pickle-only checkpoint without --allow-pickle", 2, pickle_only, "pickle", MODEL_VERBS),
    Damage("NaN weights", "4, 15", nan_weights, "seq-math", ("probe", "tokens", "eval", "vectors", "displacement")),
    Damage("infinite weights", 15, inf_weights, "seq-math", ("probe", "tokens", "eval", "vectors", "displacement")),
    Damage("tensor shape mismatch", 4, shape_mismatch, "seq-math", ("vectors", "displacement")),
    Damage("garbage results.h5", 2, corrupted_store, "results.h5", STORE_VERBS),
    Damage("truncated results.h5", 2, truncated_store, "results.h5", STORE_VERBS),
    Damage("results.h5 of a newer major version", 2, newer_store, "newer aclarena", STORE_VERBS),
)

# bad command-line values, one verb each: (verb, label, extra argv replacing the valid one, needle, issue)
BAD_ARGS = (
    ("probe", "unknown reference (did-you-mean)", ["probe", "--ref", "seq-mat", "--prompts", "{prompts}"],
     "did you mean 'seq-math'", 3),
    ("probe", "empty prompts file", ["probe", "--ref", "seq-math", "--prompts", "{empty}"], "empty", 3),
    ("probe", "malformed prompts line", ["probe", "--ref", "seq-math", "--prompts", "{malformed}"], "line 2", 3),
    ("probe", "-n 0", ["probe", "--ref", "seq-math", "--prompts", "{prompts}", "-n", "0"], "-n", 3),
    ("tokens", "unknown reference (did-you-mean)", ["tokens", "--ref", "seq-mth"], "did you mean 'seq-math'", 3),
    ("tokens", "reference without later checkpoints", ["tokens", "--ref", "oracle-math"], "no later", 3),
    ("tokens", "bad --high", ["tokens", "--ref", "seq-math", "--high", "q=2"], "--high", 3),
    ("tokens", "unknown probe set", ["tokens", "--ref", "seq-math", "--probe", "nope"], "probe set", 3),
    ("eval", "unknown suite (did-you-mean)", ["eval", "--suites", "math/idd"], "did you mean 'math/id'", 5),
    ("eval", "unknown domain (did-you-mean)", ["eval", "--suites", "maths"], "did you mean 'math'", 5),
    ("eval", "unknown checkpoint", ["eval", "--checkpoints", "seq-mat"], "did you mean 'seq-math'", 2),
    ("eval", "lm-eval file of an unknown shape", ["eval", "--import-lm-eval", "seq-math={malformed}"],
     "lm-eval", 5),
    ("eval", "--import-lm-eval without NAME=", ["eval", "--import-lm-eval", "{prompts}"], "NAME=FILE", 5),
    ("vectors", "unknown checkpoint in --pair", ["vectors", "--pair", "seq-mat-base:oracle-math-base"],
     "seq-mat", 4),
    ("displacement", "bad --tolerances", ["displacement", "--tolerances", "a,b"], "tolerance", 4),
    ("forgetting", "unknown --chain", ["forgetting", "--chain", "seq-serch"], "seq-serch", 5),
    ("probe", "--device gpu (a typo)", [*VERB_ARGV["probe"], "--device", "gpu"], "device 'gpu'", 15),
    ("tokens", "--device gpu (a typo)", [*VERB_ARGV["tokens"], "--device", "gpu"], "device 'gpu'", 15),
    ("eval", "--device gpu (a typo)", [*VERB_ARGV["eval"], "--device", "gpu"], "device 'gpu'", 15),
    ("consolidate", "empty --lambdas (was: the default sweep)", ["consolidate", "--method", "merge-ta", "--lambdas", ""],
     "--lambdas is empty", 15),
    ("consolidate", "training sizes unknown (no curriculum.toml; was: the mini sizes)",
     ["consolidate", "--method", "mmopd", "--teachers", "stage"], "needs --n, --steps, --batch, --lr", 15),
)


def fill(argv: list[str], run: Path, tmp: Path) -> list[str]:
    files = {"prompts": tmp / "prompts.jsonl", "empty": tmp / "empty.jsonl", "malformed": tmp / "malformed.jsonl"}
    if not files["prompts"].exists():
        files["prompts"].write_text('{"prompt": "what is 3 + 4?"}\n{"prompt": "the total is"}\n')
        files["empty"].write_text("")
        files["malformed"].write_text('{"prompt": "ok"}\n{"prompt": \n')
    out = [a.format(prompts=files["prompts"], empty=files["empty"], malformed=files["malformed"], tmp=tmp)
           for a in argv]
    return [*out, "--run", str(run)]


# --- `flips` (issue 17): every bad input, each one line, exit 1, results.h5 unchanged -------------
# The run gets the per-item cells of tests/flips_helpers.py first (flips reads them before any model).

FLIPS_ARGV = ["flips", "--from", "seq-math", "--to", "seq-search", "--suite", "math/id", "--no-swap"]


def _flips_other_args(*extra: str) -> list[str]:
    out = list(FLIPS_ARGV)
    for flag, value in zip(extra[::2], extra[1::2], strict=True):
        if flag in out:
            out[out.index(flag) + 1] = value
        else:
            out += [flag, value]
    return out


def _no_per_item(run: Path) -> None:
    from flips_helpers import write_cells

    write_cells(run, per_item=False)


def _lm_eval_cells(run: Path) -> None:
    from flips_helpers import write_cells

    write_cells(run, source="lm-eval", per_item=False)  # imported without --log_samples: nothing to pair


def _other_tokenizer(run: Path) -> None:
    from fixtures import make_tokenizer
    from flips_helpers import OUTCOMES, write_cells
    from tokens_helpers import add_checkpoint

    from aclarena.models.tiny import build_model, tiny_config

    other = make_tokenizer(vocab_size=400)
    add_checkpoint(run, "other-tok", build_model(tiny_config(other), seed=9), other, parent="seq-math")
    write_cells(run, {**OUTCOMES, "other-tok": [0, 1, 0, 0]})


def _nan_later(run: Path) -> None:
    _poison(run, float("nan"), "seq-search")


def _damaged_flips_result(run: Path) -> None:
    """A stored flips result of the same settings whose settings attribute is not JSON."""
    import h5py
    from flips_helpers import hand_made_result, write_result

    res = hand_made_result()
    key = write_result(run, res)
    with h5py.File(run / "results.h5", "r+") as f:
        f[key].attrs["settings"] = "{"


@dataclass(frozen=True)
class FlipsCase:
    label: str
    issue: int | str
    setup: Callable[[Path], None] | None  # after the cells are written
    argv: list[str]
    needle: str


FLIPS_CASES = (
    # damaged runs (the matrix's inputs)
    FlipsCase("garbled manifest (TOML error)", 2, garbled_manifest, FLIPS_ARGV, "line"),
    FlipsCase("missing manifest", 2, missing_manifest, FLIPS_ARGV, "aclarena.toml"),
    FlipsCase("parent cycle", 2, parent_cycle, FLIPS_ARGV, "cycle"),
    FlipsCase("duplicate checkpoint name", 2, duplicate_name, FLIPS_ARGV, "seq-math"),
    FlipsCase("missing checkpoint folder", 2, missing_folder, FLIPS_ARGV, "seq-math"),
    FlipsCase("folder without weights", 2, no_weights, FLIPS_ARGV, "seq-math"),
    FlipsCase("pickle-only checkpoint without --allow-pickle", 2, pickle_only, FLIPS_ARGV, "pickle"),
    FlipsCase("NaN weights in --from", 15, nan_weights, FLIPS_ARGV, "'seq-math' has NaN weights"),
    FlipsCase("infinite weights in --from", 15, inf_weights, FLIPS_ARGV, "'seq-math' has infinite weights"),
    FlipsCase("NaN weights in --to", 15, _nan_later, FLIPS_ARGV, "'seq-search' has NaN weights"),
    FlipsCase("garbage results.h5", 2, corrupted_store, FLIPS_ARGV, "results.h5"),
    FlipsCase("truncated results.h5", 2, truncated_store, FLIPS_ARGV, "results.h5"),
    FlipsCase("results.h5 of a newer major version", 2, newer_store, FLIPS_ARGV, "newer aclarena"),
    FlipsCase("a stored flips result of these settings that is damaged", 15, _damaged_flips_result, FLIPS_ARGV,
              "is damaged"),
    # what issue 17 lists
    FlipsCase("suite without per-item outcomes", 17, _no_per_item, FLIPS_ARGV, "no per-item outcomes"),
    FlipsCase("a pair with no flips", 17, None, _flips_other_args("--to", "oracle-math"), "nothing flipped"),
    FlipsCase("different tokenizers", 17, _other_tokenizer, _flips_other_args("--to", "other-tok"),
              "tokenizers differ"),
    FlipsCase("lm-eval cells without per-sample scores", 17, _lm_eval_cells, FLIPS_ARGV, "no per-item outcomes"),
    # names and values
    FlipsCase("unknown --from (did-you-mean)", 17, None, _flips_other_args("--from", "seq-maht"),
              "did you mean 'seq-math'"),
    FlipsCase("unknown --to (did-you-mean)", 17, None, _flips_other_args("--to", "seq-serch"),
              "did you mean 'seq-search'"),
    FlipsCase("--from and --to the same", 17, None, _flips_other_args("--to", "seq-math"), "both 'seq-math'"),
    FlipsCase("unknown suite (the evaluated ones listed)", 17, None, _flips_other_args("--suite", "math/idd"),
              "it has: math/id"),
    FlipsCase("suite not evaluated", 17, None, _flips_other_args("--suite", "search/id"), "no capability cell"),
    FlipsCase("--budgets 0", 17, None, _flips_other_args("--budgets", "0,5"), "--budgets"),
    FlipsCase("--budgets over 100", 17, None, _flips_other_args("--budgets", "1,150"), "--budgets"),
    FlipsCase("--budgets not numbers", 17, None, _flips_other_args("--budgets", "1,x"), "--budgets"),
    FlipsCase("--budgets empty", 17, None, _flips_other_args("--budgets", ""), "--budgets"),
    FlipsCase("--budgets nan", 17, None, _flips_other_args("--budgets", "nan"), "--budgets"),
    FlipsCase("--top outside (0, 1)", 17, None, _flips_other_args("--top", "1.5"), "--top"),
    FlipsCase("--top nan", 17, None, _flips_other_args("--top", "nan"), "--top"),
    FlipsCase("--topk 0", 17, None, _flips_other_args("--topk", "0"), "--topk"),
    FlipsCase("--logprob-below above 0", 17, None, _flips_other_args("--logprob-below", "0.5"), "--logprob-below"),
    FlipsCase("--max-items 0", 17, None, _flips_other_args("--max-items", "0"), "--max-items"),
    FlipsCase("--batch-size 0", 17, None, _flips_other_args("--batch-size", "0"), "--batch-size"),
    FlipsCase("--device gpu (a typo)", 15, None, _flips_other_args("--device", "gpu"), "device 'gpu'"),
)


def one_line(err: str, verb: str) -> str:
    """The single error line a refused verb prints (no traceback), checked and returned."""
    assert "Traceback" not in err, err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"aclarena-diag {verb}: error: "), err
    return lines[0]


def tree(root: Path) -> dict[str, str]:
    """Every file under ``root`` with a hash of its bytes (what a refused verb must leave as it was)."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()[:16]
            for p in sorted(root.rglob("*")) if p.is_file()}


def set_config(run: Path, checkpoint: str = "seq-math", **fields: object) -> None:
    """Overwrite ``fields`` of a checkpoint's config.json (a config that lies about its weights)."""
    f = run / "checkpoints" / checkpoint / "config.json"
    f.write_text(json.dumps(json.loads(f.read_text()) | fields))


def checkpoint_rows(cli: Callable[..., tuple[int, str, str]], run: Path, *extra: str) -> dict[str, dict]:
    """``checkpoints --json``'s rows by name (the verb must succeed)."""
    code, out, err = cli("checkpoints", "--json", "--run", str(run), *extra)
    assert code == 0, err
    return {r["name"]: r for r in json.loads(out)["checkpoints"]}
