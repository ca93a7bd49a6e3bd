"""``aclarena-diag probe``: freeze a reference checkpoint's generations as a probe set."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from aclarena.cli._common import add_verb, manifest_of, print_json, print_table, progress, quiet_libraries
from aclarena.errors import AclarenaError

DEFAULT_DOMAIN_N = 32


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


def _domain_prompts(domain: str, n: int, seed: int, ref: str) -> list[dict[str, Any]]:
    try:
        from aclarena.envs import sample_prompts  # built by the mini-arena issue; optional until then
    except ImportError:
        raise AclarenaError(
            f"prompts of domain {domain!r} need the mini-arena environments (aclarena.envs.sample_prompts), which "
            f"this install does not have; make the probe set from a file: `aclarena-diag probe --ref {ref} "
            "--prompts FILE.jsonl` (or --from-traces FILE.jsonl)"
        ) from None
    try:
        prompts = sample_prompts(domain, n, seed, split="eval", suite="id")
    except AclarenaError:
        raise
    except (KeyError, ValueError) as e:
        raise AclarenaError(f"cannot sample prompts of domain {domain!r}: {e}") from None
    return [dict(p) for p in prompts]


def make_probe(
    run_dir: str,
    manifest: Any,
    ref: str,
    name: str,
    *,
    prompts_file: str | None = None,
    domain: str | None = None,
    traces_file: str | None = None,
    n: int | None = None,
    settings: Any = None,
    load: Any = None,
    show_progress: bool = True,
    world: Any = None,
    engine: str = "hf",
) -> Any:
    """Build (not store) a probe set: generate with ``ref`` or import traces (``probe`` and ``tokens`` use it).

    With a data-parallel ``world`` the generation is shared by the ranks; rank 0 gets the
    probe set, the other ranks None.
    """
    from aclarena.models.checkpoint import inspect
    from aclarena.models.loading import LoadOptions, load_model, load_tokenizer
    from aclarena.probes.generation import GenerationSettings, generate_probe_set, model_max_length
    from aclarena.probes.probe_set import probe_set_from_conversations, read_prompts, read_traces

    spec = manifest.resolve(ref)
    settings = settings or GenerationSettings()
    if engine == "vllm" and not traces_file:
        from aclarena.models.vllm_engine import require_vllm

        require_vllm()
    load = load or LoadOptions()
    if n is not None and n < 1:
        raise AclarenaError(f"-n must be at least 1, got {n}")
    # read and validate the inputs before loading anything
    conversations = prompts = None
    if traces_file:
        conversations = read_traces(traces_file)[: n or None]
    elif prompts_file:
        prompts = read_prompts(prompts_file)[: n or None]
    elif domain:
        prompts = _domain_prompts(domain, n or DEFAULT_DOMAIN_N, settings.seed, ref)
    else:
        raise AclarenaError("say where the probe comes from: --prompts FILE.jsonl, --domain D or --from-traces FILE.jsonl")
    info = inspect(spec, manifest, run_dir, allow_pickle=load.allow_pickle)
    info.require_loadable()
    tok = load_tokenizer(spec, manifest, run_dir, padding_side="left")
    if conversations is not None:
        cfg = info.config or {}
        limit = cfg.get("max_position_embeddings") or cfg.get("n_positions")
        if world is not None and not world.is_main:
            return None  # importing traces is cheap: rank 0 does it alone
        with progress(show_progress) as bar:
            task = bar.add_task(f"tokenizing traces for {name}", total=len(conversations))
            return probe_set_from_conversations(
                conversations, tok, name=name, reference=ref, max_length=limit, vocab_size=cfg.get("vocab_size"),
                settings={"source": "traces", "file": str(Path(traces_file).resolve()),
                          "tokenizer": info.tokenizer_fingerprint},
                progress=lambda k: bar.advance(task, k))
    assert prompts is not None
    device = world.device(load.device) if world is not None else load.device
    if engine == "vllm":
        from aclarena.models.vllm_engine import load_llm

        if world is not None and world.distributed:
            raise AclarenaError("--engine vllm runs one process (vLLM parallelizes itself); do not start it with "
                                "torchrun")
        model = load_llm(ref, manifest, run_dir, load, seed=settings.seed)
    else:
        model = load_model(spec, manifest, run_dir, LoadOptions(dtype=load.dtype, device=device,
                                                                allow_pickle=load.allow_pickle, merge_adapter=True,
                                                                device_map=load.device_map))
    with progress(show_progress) as bar:
        task = bar.add_task(f"generating with {ref}", total=len(prompts))
        probe = generate_probe_set(model, tok, prompts, name=name, reference=ref, settings=settings,
                                   max_length=model_max_length(model), source="domain" if domain else "prompts",
                                   progress=lambda k: bar.advance(task, k), world=world)
    if probe is None:
        return None
    probe.settings.update({"tokenizer": info.tokenizer_fingerprint, "domain": domain,
                           "file": str(Path(prompts_file).resolve()) if prompts_file else None})
    return probe


def describe(probe: Any) -> dict[str, Any]:
    responses = [int(m.sum()) for m in probe.scored]
    return {
        "probe": probe.name,
        "reference": probe.reference,
        "source": probe.settings.get("source"),
        "sequences": probe.n_sequences,
        "tokens": probe.n_tokens,
        "scored": probe.n_scored,
        "mean_scored_per_sequence": sum(responses) / len(responses),
        "digest": probe.digest,
        "warnings": list(probe.warnings),
    }


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
    from aclarena.store.manifest import NAME_RE
    from aclarena.store.token_keys import tokens_key

    quiet_libraries()
    manifest = manifest_of(args)
    manifest.resolve(args.ref)
    name = args.name or args.ref
    if not NAME_RE.match(name):
        raise AclarenaError(f"probe name {name!r} is not allowed; use letters, digits, '.', '_' and '-'")
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
    write_probe_set(store, probe, overwrite=True, manifest_text=manifest.to_toml())
    if store.has(tokens_key(name)):
        store.delete(tokens_key(name))  # scores of the replaced probe set no longer apply
    row = describe(probe)
    if args.json:
        print_json(row)
    else:
        print_table([row], ["probe", "reference", "source", "sequences", "tokens", "scored", "mean_scored_per_sequence"],
                    headers=["probe", "reference", "source", "sequences", "tokens", "scored", "scored/seq"],
                    title=f"probe set stored in {store.path}")
    print_warnings(probe.warnings, "probe")
    return 0
