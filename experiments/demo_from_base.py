"""Experiment: the demo (its recipe, examples/mini.toml, and every analysis) from another base folder.

``aclarena-diag demo`` always starts from the shipped base. To ask what the same recipe does from a
candidate base (a sweep size, more pretraining data) before shipping it, this writes examples/mini.toml
with ``[base] model = BASE`` to the run folder and runs the demo verb on it, unchanged otherwise.
The summary's ``made_by`` is rewritten to this command, since the verb would name the preset.

    python experiments/demo_from_base.py --base runs/sweep-data/3m-x4/run/checkpoints/base \
        --out runs/demo-x4 --name mini-x4 -n 100
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def config_text(base: str, name: str) -> str:
    text = (REPO / "examples" / "mini.toml").read_text(encoding="utf-8").replace('name = "mini"', f"name = {json.dumps(name)}", 1)
    old = 'preset = "mini"\n\n[defaults.sft]'
    if old not in text:
        raise SystemExit("error: examples/mini.toml has no `preset = \"mini\"` line before [defaults.sft]; update this script")
    return text.replace(old, f"model = {json.dumps(base)}\n\n[defaults.sft]", 1)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--base", required=True, help="the base folder (safetensors and tokenizer) to start from")
    p.add_argument("--out", required=True, help="run folder; rerun to resume")
    p.add_argument("--name", default="mini-from-base", help="the run's [run] name")
    p.add_argument("-n", type=int, default=100, help="evaluation tasks per suite")
    args = p.parse_args()
    if not (Path(args.base) / "config.json").is_file():
        raise SystemExit(f"error: {args.base} is not a model folder (no config.json); name a finished base")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cfg = out / "demo-config.toml"
    cfg.write_text(config_text(args.base, args.name), encoding="utf-8")

    import aclarena.train.presets as presets
    from aclarena.cli import main as cli

    shipped = presets.preset_path
    presets.preset_path = lambda name: cfg if name == "mini" else shipped(name)  # the demo reads its preset here
    code = cli(["demo", "--out", str(out), "-n", str(args.n)])
    summary = out / "summary.json"
    if summary.is_file():
        data = json.loads(summary.read_text(encoding="utf-8"))
        data["made_by"]["command"] = f"python experiments/demo_from_base.py --base {args.base} --out {args.out} --name {args.name} -n {args.n}"
        summary.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    return code


if __name__ == "__main__":
    raise SystemExit(main())
