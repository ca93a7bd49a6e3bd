"""``aclarena-diag probe``: freeze a reference checkpoint's generations as a probe set."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from aclarena.analysis.probe import DEFAULT_DOMAIN_N, describe, make_probe
from aclarena.cli._common import add_verb, manifest_of, print_json, print_table, quiet_libraries
from aclarena.errors import AclarenaError


def add_load_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dtype", default="auto", choices=("auto", "float32", "bfloat16", "float16"),
                   help="dtype to load models in (default: auto = float32 on CPU, stored dtype on GPU)")
    p.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N or auto (default: cpu)")
    p.add_argument("--allow-pickle", action="store_true", help="accept pickle weights (pytorch_model.bin)")
    p.add_argument("--device-map", default=None, metavar="MAP",
                   help="spread a model larger than one GPU over the visible GPUs (e.g. auto; needs accelerate)")


def load_options(args: argparse.Namespace, **extra: Any) -> Any:
    """The LoadOptions of the command line's --dtype, --device, --device-map and --allow-pickle."""
    from aclarena.models.loading import LoadOptions

    return LoadOptions(dtype=args.dtype, device=args.device, allow_pickle=args.allow_pickle,
                       device_map=getattr(args, "device_map", None), **extra)


def add_probe_source_options(p: argparse.ArgumentParser) -> None:
    src = p.add_mutually_exclusive_group()
    src.add_argument("--prompts", metavar="FILE.jsonl",
                     help='prompts, one JSON object per line: {"messages": [...], "tools": [...]} or {"prompt": "..."}')
    src.add_argument("--domain", metavar="D", help="sample prompts of a mini-arena domain (math, search, ecom, if)")
    src.add_argument("--from-traces", metavar="FILE.jsonl", dest="from_traces",
                     help="import complete conversations instead of generating (assistant tokens are scored)")
    p.add_argument("-n", type=int, default=None, metavar="N",
                   help=f"number of prompts (default: all lines of a file, {DEFAULT_DOMAIN_N} for --domain)")
    p.add_argument("--max-new-tokens", type=int, default=128, metavar="T", help="tokens to generate per prompt (default 128)")
    p.add_argument("--temperature", type=float, default=0.0, metavar="T", help="sampling temperature; 0 = greedy (default)")
    p.add_argument("--seed", type=int, default=0, help="random seed for prompts and sampling (default 0)")
    p.add_argument("--engine", choices=("hf", "vllm"), default="hf",
                   help="generate with transformers (hf, default) or vLLM (GPU machines, the gpu extra)")


def register(sub: argparse._SubParsersAction) -> None:
    p = add_verb(
        sub,
        "probe",
        help="freeze generations of a reference checkpoint as a probe set (for `tokens`)",
        description="Generate from the reference checkpoint on prompts (or import traces) and store the token ids, "
        "the mask of the tokens the model generated, the texts and the generation settings.",
        examples=(
            "aclarena-diag probe --ref seq-math --run runs/demo --domain math -n 64",
            "aclarena-diag probe --ref seq-math --run runs/mine --prompts prompts.jsonl --max-new-tokens 256",
            "aclarena-diag probe --ref seq-ecom --run runs/mine --from-traces rollouts.jsonl --name ecom-traces",
        ),
    )
    p.add_argument("--ref", required=True, metavar="NAME", help="the reference checkpoint (a manifest name)")
    p.add_argument("--name", metavar="P", help="name of the probe set (default: the reference's name)")
    add_probe_source_options(p)
    p.add_argument("--batch-size", type=int, default=8, metavar="B", help="prompts per generate call (default 8)")
    p.add_argument("--force", action="store_true", help="replace an existing probe set of that name (and its scores)")
    add_load_options(p)
    p.set_defaults(func=run)


def print_warnings(warnings: list[str], verb: str) -> None:
    for w in warnings:
        print(f"aclarena-diag {verb}: warning: {w}", file=sys.stderr)


def run(args: argparse.Namespace) -> int:
    from aclarena.distributed import world

    with world(args.device) as w:
        return _run(args, w)


def _run(args: argparse.Namespace, w: Any) -> int:
    from aclarena.probes.probe_set import list_probe_sets, write_probe_set
    from aclarena.store import ResultsStore
    from aclarena.store.manifest import check_name

    quiet_libraries()
    manifest = manifest_of(args)
    manifest.resolve(args.ref)
    name = check_name(args.name or args.ref, "probe name")
    store = ResultsStore(args.run)

    def check_free() -> None:  # rank 0 alone opens the store
        if name in list_probe_sets(store) and not args.force:
            raise AclarenaError(f"probe set {name!r} already exists in {store.path}; pass --force to replace it "
                                "(its token scores are dropped) or --name OTHER")

    w.run_main(check_free)
    from aclarena.probes.generation import GenerationSettings

    settings = GenerationSettings(max_new_tokens=args.max_new_tokens, temperature=args.temperature, seed=args.seed,
                                  batch_size=args.batch_size)
    probe = make_probe(args.run, manifest, args.ref, name, prompts_file=args.prompts, domain=args.domain,
                       traces_file=args.from_traces, n=args.n, settings=settings,
                       load=load_options(args), show_progress=not args.json and w.is_main, world=w,
                       engine=args.engine)
    if probe is None:  # another rank than 0: its share is with rank 0, which writes
        return 0
    # one atomic step: the probe set and the removal of the replaced set's token scores
    write_probe_set(store, probe, overwrite=True, manifest_text=manifest.to_toml())
    row = describe(probe)
    if args.json:
        print_json(row)
    else:
        print_table([row], ["probe", "reference", "source", "sequences", "tokens", "scored", "mean_scored_per_sequence"],
                    headers=["probe", "reference", "source", "sequences", "tokens", "scored", "scored/seq"],
                    title=f"probe set stored in {store.path}")
    print_warnings(probe.warnings, "probe")
    return 0
