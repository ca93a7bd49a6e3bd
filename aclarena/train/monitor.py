"""The curriculum's ``[monitor]`` section: a drift monitor on the later stages of a run.

With a ``[monitor]`` table in the curriculum TOML, every phase of a monitored stage (by
default every stage after the first) trains with a
:class:`~aclarena.train.callbacks.DriftMonitorCallback` whose probe sets are frozen
generations of the earlier stages' checkpoints on their own domains (``monitor-math`` is
seq-math answering math prompts), stored in results.h5 under ``probes/`` the first time
they are needed. The probe's reference is that checkpoint; the stage-start policy is the
parent of the stage's first phase (so the RL phase of a two-phase stage is still compared
with the stage start). With ``razor = true`` (the default) one more probe set,
``razor-<domain>``, holds the stage-start policy's own generations on training prompts of the
stage being trained: its ``fkl`` is RL's Razor's predictor as the paper defines it (Shenfeld et
al. 2025, arXiv 2509.04259: the forward KL ``KL(π_0 ‖ π)`` on the *new* task's distribution),
while the ``fkl`` of the ``monitor-*`` probes is an adaptation of it to the earlier tasks'
distribution. Scalars go to the run's ``series.h5`` under ``monitor/<phase>``::

    [monitor]
    stages = ["ecom", "if"]        # default: every stage after the first
    domains = ["math", "search"]   # earlier domains to probe (default: all earlier ones)
    probes = []                    # extra probe sets already in results.h5 (aclarena-diag probe)
    probe_n = 8                    # prompts per domain probe set
    probe_max_new_tokens = 64
    razor = true                   # also probe the trained stage's own prompts (RL's Razor)
    every_n_steps = 10
    high = "q=0.06"
    on_warning = "log"             # log | save | stop
    on_store_error = "raise"       # raise | continue

    [monitor.thresholds]           # absolute limits (metric = value, or "off"); provisional defaults
    fkl = 0.05
    [monitor.trend]                # the EWMA z-score rule
    metrics = ["kl_high", "kl_all", "flip_high", "fkl"]
    z = 3.0

docs/monitor.md lists every key, the metrics and where the provisional default limits come from
(one mini run; not yet fitted on held-out seeds). The section is parsed and validated with the config
(:mod:`aclarena.train.monitor_spec`); this module makes the probe sets and the callbacks from it.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from aclarena.distributed import is_main_process, wait_for_everyone
from aclarena.errors import AclarenaError
from aclarena.train.config import CurriculumConfig
from aclarena.train.monitor_spec import MonitorSpec
from aclarena.train.naming import phase_names, replicate_suffix
from aclarena.train.plan import Job

PROBE_PREFIX = "monitor-"
#: probe sets of the stage being trained: the stage start's generations on its training prompts
RAZOR_PREFIX = "razor-"


# --- probe sets of earlier stages ---------------------------------------------------------------


def domain_probe(run_dir: str | os.PathLike[str], checkpoint: str, folder: str | os.PathLike[str], domain: str, *,
                 name: str, n: int, max_new_tokens: int, seed: int = 0, batch_size: int = 8,
                 split: str = "eval", loaded: dict[str, Any] | None = None) -> Any:
    """The probe set ``name``: ``checkpoint``'s greedy generations on ``n`` prompts of ``domain`` (``split``:
    held-out ``eval`` prompts, or ``train`` prompts for a stage's own RL's Razor probe).

    Read from results.h5 when it is there with the same settings (and the checkpoint has not
    changed since), otherwise generated and stored. ``loaded`` (folder -> model and tokenizer) keeps a
    checkpoint loaded for the next probe set made from it.
    """
    from aclarena.envs import sample_prompts
    from aclarena.models.chat import choose_prompt_format, has_template
    from aclarena.models.tokenizer_files import tokenizer_fingerprint
    from aclarena.probes.generation import GenerationSettings, generate_probe_set, model_max_length
    from aclarena.results.probes import list_probe_sets, read_probe_set, write_probe_set
    from aclarena.store import ResultsStore
    from aclarena.train.phase_record import read_marker
    from aclarena.train.phases import load_start

    store = ResultsStore(run_dir)
    folder = Path(folder)
    marker = read_marker(folder) or {}
    want = {"source": "monitor", "domain": domain, "n": n, "max_new_tokens": max_new_tokens, "seed": seed,
            "checkpoint_fingerprint": marker.get("fingerprint")}
    if split != "eval":  # eval probes keep the identity they were stored with
        want["split"] = split
    if name in list_probe_sets(store):
        probe = read_probe_set(store, name)
        have = {k: probe.settings.get(k) for k in want}
        if have == want and probe.reference == checkpoint:
            return probe
    key = str(folder.resolve())
    if loaded is not None and key in loaded:
        model, tok = loaded[key]
    else:
        model, tok = load_start(folder, require_chat_template=False)
        if loaded is not None:
            loaded[key] = (model, tok)
    tok.padding_side = "left"
    # prompted as eval prompts it: a checkpoint without a chat template (a base) as plain text (issue 45)
    prompt_format, note = choose_prompt_format(None, has_template(tok), checkpoint=checkpoint)
    if note is not None:
        logging.getLogger("aclarena.monitor").info("probe %s: %s", name, note)
    prompts = sample_prompts(domain, n, seed, split=split, suite="id")
    settings = GenerationSettings(max_new_tokens=max_new_tokens, temperature=0.0, seed=seed, batch_size=batch_size)
    made = generate_probe_set(model, tok, prompts, name=name, reference=checkpoint, settings=settings,
                              max_length=model_max_length(model), source="domain", prompt_format=prompt_format)
    assert made is not None  # None only for the other ranks of a `world`, and none is given here
    probe = made
    probe.settings.update(want)
    probe.settings["tokenizer"] = tokenizer_fingerprint(folder)
    del model
    manifest = Path(run_dir) / "aclarena.toml"
    write_probe_set(store, probe, overwrite=True,
                    manifest_text=manifest.read_text(encoding="utf-8") if manifest.is_file() else None)
    return probe


# --- the factory the curriculum runner calls ----------------------------------------------------


def monitor_factory(cfg: CurriculumConfig, out: str | os.PathLike[str], jobs: Sequence[Job],
                    folders: Callable[[str], str],
                    riders: Callable[[Job, Any], Sequence[Any]] | None = None) -> Callable[[Job], list[Any]]:
    """``factory(job) -> [DriftMonitorCallback, *riders]`` for :func:`aclarena.train.curriculum.run_curriculum`.

    ``folders(name)`` gives a trained checkpoint's location (a folder under ``out`` or the HF base).
    ``riders(job, monitor)``: more callbacks that write through the monitor's ``series.h5`` writer (one writer
    per file), e.g. the study's ground truth riding the chain's own stage
    (:func:`aclarena.train.lead_time.ground_truth_riders`).
    """
    spec = cfg.monitor
    assert spec is not None  # built only for a curriculum with a [monitor] table
    out = Path(out)
    by_name = {j.name: j for j in jobs}
    order = [s.domain for s in cfg.stages]
    monitored = set(spec.stages) if spec.stages is not None else set(order[1:])

    def factory(job: Job) -> list[Any]:
        from aclarena.results.probes import read_probe_set
        from aclarena.store import ResultsStore
        from aclarena.train.callbacks import DriftMonitorCallback
        from aclarena.train.phase_record import finished

        if job.kind != "stage" or job.domain is None or job.domain not in monitored:
            return []
        if finished(out / "checkpoints" / job.name, job.fingerprint) is not None:
            return []
        i = order.index(job.domain)
        earlier = [cfg.stages[k] for k in range(i)]
        if spec.domains is not None:
            earlier = [s for s in earlier if s.domain in spec.domains]
        r = job.replicate
        suffix = replicate_suffix(r)
        wanted: list[tuple[str, str, str]] = []  # (probe name, checkpoint, domain)
        for st in earlier:
            ckpt = phase_names("seq", st, r)[-1]
            wanted.append((f"{PROBE_PREFIX}{st.domain}{suffix}", ckpt, st.domain))
        stage = cfg.stages[i]
        first = by_name[phase_names("seq", stage, r)[0]]
        splits = {name: "eval" for name, _, _ in wanted}
        if spec.razor and first.parent is not None:
            # RL's Razor as the paper measures it: π_0's own generations on the new task's prompts
            name = f"{RAZOR_PREFIX}{job.domain}{suffix}"
            wanted.append((name, first.parent, job.domain))
            splits[name] = "train"
        if not wanted and not spec.probes:
            return []
        if is_main_process():
            loaded: dict[str, Any] = {}  # a checkpoint that makes several probe sets is loaded once
            for name, ckpt, domain in wanted:
                domain_probe(out, ckpt, folders(ckpt), domain, name=name, n=spec.probe_n,
                             max_new_tokens=spec.probe_max_new_tokens, seed=spec.probe_seed,
                             batch_size=spec.batch_size, split=splits[name], loaded=loaded)
            del loaded
        wait_for_everyone()
        store = ResultsStore(out)
        probes = [read_probe_set(store, name) for name, _, _ in wanted]
        references: dict[str, Any] = {name: folders(ckpt) for name, ckpt, _ in wanted}
        known = {j.name for j in jobs}
        for extra in spec.probes:
            p = read_probe_set(store, extra)
            probes.append(p)
            if p.reference in known:
                references[p.name] = folders(p.reference)
        start = folders(first.parent) if first.parent is not None else None
        monitor = DriftMonitorCallback(
            probes, run_dir=out, label=job.name, references=references, stage_start=start, settings=spec.callback)
        return [monitor, *(riders(job, monitor) if riders is not None else ())]

    return factory


def with_on_warning(cfg: CurriculumConfig, action: str) -> CurriculumConfig:
    """``cfg`` with its monitor acting ``action`` on warnings (a default monitor when it has none)."""
    spec = cfg.monitor if cfg.monitor is not None else MonitorSpec()
    if action not in ("log", "save", "stop"):
        raise AclarenaError(f"unknown warning action {action!r}")
    return dataclasses.replace(cfg, monitor=dataclasses.replace(spec, on_warning=action))
