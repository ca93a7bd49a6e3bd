"""Probe sets made from a run: generate with a reference checkpoint, or import traces (``aclarena-diag probe``).

:func:`make_probe` builds a probe set (the ``probe`` verb stores it; ``tokens`` makes one with
defaults when the reference has none).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aclarena.errors import AclarenaError
from aclarena.progress import progress

if TYPE_CHECKING:
    from aclarena.distributed import World
    from aclarena.models.loading import LoadOptions
    from aclarena.probes.generation import GenerationSettings
    from aclarena.store.manifest import Manifest

DEFAULT_DOMAIN_N = 32


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


def domain_prompts(manifest: Manifest, run_dir: str | os.PathLike[str], domain: str, n: int, seed: int,
                   ref: str) -> tuple[list[dict[str, Any]], str]:
    """Prompts of ``domain`` and where they come from: the run's own suites of that domain
    (``[suites.NAME]`` with ``domain = ...``) before the mini arena's tasks of that name."""
    try:
        from aclarena.envs.custom import suite_prompts
    except ImportError:  # an install without the environments: _domain_prompts says so
        own = None
    else:
        own = suite_prompts(manifest, run_dir, domain, n, seed)
    if own is not None:
        prompts, names = own
        return prompts, f"the run's suite{'s' if len(names) > 1 else ''} {', '.join(names)} (domain {domain})"
    return _domain_prompts(domain, n, seed, ref), f"the mini arena's {domain}/id tasks"


def make_probe(
    run_dir: str | os.PathLike[str],
    manifest: Manifest,
    ref: str,
    name: str,
    *,
    prompts_file: str | None = None,
    domain: str | None = None,
    traces_file: str | None = None,
    n: int | None = None,
    settings: GenerationSettings | None = None,
    load: LoadOptions | None = None,
    show_progress: bool = True,
    world: World | None = None,
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
    prompt_source = None
    if traces_file:
        conversations = read_traces(traces_file)[: n or None]
    elif prompts_file:
        prompts = read_prompts(prompts_file)[: n or None]
    elif domain:
        prompts, prompt_source = domain_prompts(manifest, run_dir, domain, n or DEFAULT_DOMAIN_N, settings.seed, ref)
    else:
        raise AclarenaError("say where the probe comes from: --prompts FILE.jsonl, --domain D or --from-traces FILE.jsonl")
    info = inspect(spec, manifest, run_dir, allow_pickle=load.allow_pickle)
    info.require_loadable()
    tok = load_tokenizer(spec, manifest, run_dir, padding_side="left")
    from aclarena.analysis._common import prompt_format_of
    from aclarena.models.chat import has_template

    prompt_format, format_note = prompt_format_of(spec, manifest, run_dir, template=has_template(tok))
    if conversations is not None:
        if prompt_format != "chat":
            raise AclarenaError(f"--from-traces tokenizes conversations with the chat template, and {ref!r} is prompted "
                                f"as plain text ({format_note or 'its prompt_format'}); make its probe set from "
                                "--prompts or --domain, or give it a chat template")
        from aclarena.models.arch import context_length

        cfg = info.config or {}
        limit = context_length(cfg)
        if world is not None and not world.is_main:
            return None  # importing traces is cheap: rank 0 does it alone
        assert traces_file is not None
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
                                   progress=lambda k: bar.advance(task, k), world=world, prompt_format=prompt_format)
    if probe is None:
        return None
    from aclarena.models.tensors import weights_fingerprint

    raw = sum(1 for p in prompts if "messages" not in p)
    if raw and prompt_format == "chat":
        probe.warnings.append(
            f"{raw} of {len(prompts)} prompts are plain \"prompt\" lines, generated from as raw text without the "
            f"chat template that eval renders for {ref}; write {{\"messages\": [{{\"role\": \"user\", "
            f"\"content\": ...}}]}} lines to probe the chat the model answers in eval")
    # the weights that generated it: `tokens` refuses the set once they change (issue 43)
    probe.settings.update({"tokenizer": info.tokenizer_fingerprint, "domain": domain, "prompt_source": prompt_source,
                           "file": str(Path(prompts_file).resolve()) if prompts_file else None,
                           "reference_weights": weights_fingerprint(info, manifest, run_dir)})
    if format_note is not None:
        probe.settings["prompt_format_note"] = format_note
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
        "prompts": probe.settings.get("prompt_source"),
        "prompt_format": probe.settings.get("prompt_format", "chat"),
        "notes": [probe.settings["prompt_format_note"]] if probe.settings.get("prompt_format_note") else [],
    }




def freeze_probe(
    run_dir: str | os.PathLike[str],
    ref: str,
    *,
    name: str | None = None,
    prompts_file: str | None = None,
    domain: str | None = None,
    traces_file: str | None = None,
    n: int | None = None,
    settings: Any = None,
    load: Any = None,
    force: bool = False,
    show_progress: bool = False,
    world: Any = None,
    engine: str = "hf",
    manifest: Any = None,
) -> Any:
    """Make ``ref``'s probe set (named ``name``, default ``ref``) and store it (``aclarena-diag probe``).

    An existing set of that name is refused unless ``force`` (then it and its token scores are
    replaced in one step). With a data-parallel ``world`` rank 0 gets the stored probe set, the
    other ranks None.
    """
    from aclarena.analysis._common import manifest_or_load
    from aclarena.progress import quiet_libraries
    from aclarena.results.probes import list_probe_sets, write_probe_set
    from aclarena.store import ResultsStore
    from aclarena.store.manifest import check_name

    if world is None:  # one process
        from aclarena.distributed import world as open_world

        with open_world(getattr(load, "device", "cpu")) as one:
            return freeze_probe(run_dir, ref, name=name, prompts_file=prompts_file, domain=domain,
                                traces_file=traces_file, n=n, settings=settings, load=load, force=force,
                                show_progress=show_progress, world=one, engine=engine, manifest=manifest)
    w = world
    quiet_libraries()
    manifest = manifest_or_load(run_dir, manifest)
    manifest.resolve(ref)
    name = check_name(name or ref, "probe name")
    store = ResultsStore(run_dir)

    def check_free() -> None:  # rank 0 alone opens the store
        if name in list_probe_sets(store) and not force:
            raise AclarenaError(f"probe set {name!r} already exists in {store.path}; pass --force to replace it "
                                "(its token scores are dropped) or --name OTHER")

    w.run_main(check_free)
    probe = make_probe(run_dir, manifest, ref, name, prompts_file=prompts_file, domain=domain,
                       traces_file=traces_file, n=n, settings=settings, load=load,
                       show_progress=show_progress and w.is_main, world=w, engine=engine)
    if probe is None:  # another rank than 0: its share is with rank 0, which writes
        return None
    # one atomic step: the probe set and the removal of the replaced set's token scores
    write_probe_set(store, probe, overwrite=True, manifest_text=manifest.to_toml())
    return probe
