"""The study's findings over several seeds: train, evaluate, analyse, one findings table.

:func:`run_study` trains ``seeds`` curricula of one config from one shared base
(``train --seeds N``: replicate ``r`` appends ``-s<r>`` to its names), evaluates every stage end,
SFT end and oracle in domain (and the chain on ``general``), freezes each replicate's seq-math
generations and scores its later checkpoints on them (``tokens``), measures parameter
displacement, consolidates each replicate (``consolidate``: the merges by default, SDFT, MLE and
MMOPD with ``--full``) and scores the outputs, measures the task-vector cosines of oracle-mix SFT
(SDFT from the base and from the sequential end) and of unrelated SFT tasks (oracle SFT phases of
two domains), validates the drift monitor on held-out seeds (the lead time of every replicate's
ecom stage; thresholds fitted on the first seed only: :mod:`aclarena.analysis.study_validation`), then writes
``findings.json`` (strict JSON) in the run folder: one row per finding, the value of every seed,
their mean and sample standard deviation, and the study's number beside it; the validation; each
part's wall time. Every part is resumable (finished phases, eval cells, token scores,
consolidations, Grams and lead times are reused on a rerun) and timed (``part_times``).
docs/study.md defines every row.

Each analysis is its verb's function in the analysis layer, with the verb's defaults
(:mod:`aclarena.analysis.steps`); a step that fails is recorded in ``errors`` with the line the verb
would print, and the other steps go on.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aclarena.analysis import steps as analyses
from aclarena.analysis._common import Made, Pair
from aclarena.analysis.steps import Parts, pair_arg
from aclarena.analysis.study_findings import (
    Trained,
    cells_of,
    consolidation_rows,
    cosine_rows,
    findings,
    signature_rows,
)
from aclarena.analysis.study_validation import validation_report
from aclarena.errors import AclarenaError
from aclarena.train.naming import replicate_suffix

if TYPE_CHECKING:
    from aclarena.analysis.eval import EvalResult
    from aclarena.diagnostics.token_drift import DriftSummary

FINDINGS_FILE = "findings.json"
#: ``verb(name, verb, fn)``: run one step, recording a failure under ``name`` (see :func:`run_study`)
Step = Callable[[str, str, Callable[[], Any]], Any]

#: ``--consolidations`` by default: the merges (seconds); ``--full`` adds the methods that train
CHEAP_CONSOLIDATIONS = ("merge-uniform", "merge-ties")
FULL_CONSOLIDATIONS = ("sdft", "mle", "mmopd")
PARTS = ("train", "eval", "tokens", "displacement", "consolidate", "signatures", "vectors", "validation")


@dataclass
class StudyResult:
    """What :func:`run_study` found: per-seed values and the findings rows."""

    out: Path
    seeds: list[int]
    rows: list[dict[str, Any]]
    part_times: dict[str, float]
    errors: dict[str, str] = field(default_factory=dict)
    validation: dict[str, Any] | None = None
    consolidations: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"seeds": self.seeds, "rows": self.rows, "part_times": self.part_times, "errors": self.errors,
                "consolidations": self.consolidations, "validation": self.validation}

    def to_pandas(self) -> Any:
        """DataFrame, one row per finding: finding, quantity, study, values (per seed), mean, spread."""
        from aclarena.analysis._common import frame

        return frame(self.rows)








suffix = replicate_suffix














def vector_pairs(stages: Sequence[str], replicates: int, trained: Trained, names: set[str], base: str = "base", *,
                 sdft: Mapping[int, Mapping[str, str]] | None = None) -> tuple[dict[int, Pair], dict[int, list[Pair]]]:
    """The ``vectors`` pairs of the cosine rows, per replicate (docs/study.md defines them; :func:`pair_arg`
    writes them as ``--pair`` texts).

    * mix: ``θ_sdft − θ_base`` against ``θ_sdft-from-end − θ_end``: the same domain-balanced SFT on the
      oracles' rollouts (SDFT, the study's oracle-mix SFT) run from the base and from the sequential end;
      ``sdft``: replicate -> {"base": checkpoint, "end": checkpoint}, what ``consolidate --method sdft
      --start base|end`` reported writing (its outputs, not names guessed from its naming rule);
    * unrelated: ``θ_oracle-a-sft − θ_base`` against ``θ_oracle-b-sft − θ_base`` for every pair of
      domains a != b: SFT on two different domains' data from the same start.
    """
    mix: dict[int, Pair] = {}
    unrelated: dict[int, list[Pair]] = {}
    for r in range(replicates):
        end, made = trained.end("stage", stages[-1], r), (sdft or {}).get(r, {})
        if made.get("base") in names and made.get("end") in names and end in names:
            mix[r] = ((made["base"], base), (made["end"], str(end)))
        sft = [c for d in stages if (c := trained.sft_end("oracle", d, r)) in names]
        pairs = [((a, base), (b, base)) for i, a in enumerate(sft) for b in sft[i + 1:]]
        if pairs:
            unrelated[r] = pairs
    return mix, unrelated










def lead_defaults(cfg: Any) -> tuple[int, int]:
    """Ground-truth items and evaluation interval of the lead-time runs (the demo's: 20 items every 10
    steps; 6 every 2 on the tiny preset, the fewest whose total loss can pass Holm there)."""
    return (6, 2) if getattr(getattr(cfg, "base", None), "preset", None) == "tiny" else (20, 10)


def parse_consolidations(text: str | None, full: bool) -> list[str]:
    """``--consolidations`` (comma-separated methods; default the merges) plus, with ``--full``, SDFT, MLE, MMOPD."""
    from aclarena.consolidate.methods import get_method

    if text is None:
        names = list(CHEAP_CONSOLIDATIONS)
    elif text.strip() == "none":
        names = []
    else:
        names = [x.strip() for x in text.split(",") if x.strip()]
        if not names:
            raise AclarenaError(f"--consolidations {text!r} names no method; give e.g. merge-uniform,sdft, or none")
    for m in names:
        get_method(m)  # unknown names: one line with a did-you-mean
    if full:
        names += [m for m in FULL_CONSOLIDATIONS if m not in names]
    # MLE trains its experts on the SDFT backbone: make SDFT first
    if "mle" in names and "sdft" in names and names.index("sdft") > names.index("mle"):
        names.remove("sdft")
        names.insert(names.index("mle"), "sdft")
    return names


def _check_options(cfg: Any, seeds: int, n: int, lead_n: int | None, lead_every: int | None,
                   lead_stage: str | None) -> tuple[int, int]:
    """One line per bad option of :func:`run_study`, before anything runs; the validation's ``(lead_n, lead_every)``."""
    if seeds < 1:
        raise AclarenaError(f"--seeds must be >= 1, got {seeds}")
    if n < 1:
        raise AclarenaError(f"-n must be >= 1, got {n}")
    d_n, d_every = lead_defaults(cfg)
    lead_n = d_n if lead_n is None else lead_n
    lead_every = d_every if lead_every is None else lead_every
    if lead_n < 1 or lead_every < 1:
        raise AclarenaError(f"--lead-n and --lead-every must be >= 1, got {lead_n} and {lead_every}")
    stages = [s.domain for s in cfg.stages]
    if lead_stage is not None and lead_stage not in stages[1:]:
        raise AclarenaError(f"--lead-stage {lead_stage}: not a stage after the first of this curriculum; "
                            f"name one of {', '.join(stages[1:]) or '(none: one stage)'}")
    return lead_n, lead_every


def run_study(cfg: Any, out: str | os.PathLike[str], *, seeds: int, n: int = 100,
              show_progress: bool = False, config_text: str | None = None,
              on_part: Callable[[str, float], None] | None = None,
              on_start: Callable[[str], None] | None = None,
              consolidations: Sequence[str] = CHEAP_CONSOLIDATIONS, vectors: bool = True,
              validation: bool = True, lead_n: int | None = None, lead_every: int | None = None,
              lead_stage: str | None = None, command: str | None = None, signatures: bool = True,
              signature_n: int | None = None) -> StudyResult:
    """Train ``seeds`` curricula of ``cfg`` into ``out``, evaluate, analyse; write findings.json.

    ``n`` tasks per suite (greedy); ``on_start(text)`` / ``on_part(name, seconds)`` are called before /
    after each part. ``consolidations``: the ``consolidate`` methods to run and compare; ``vectors``:
    the task-vector cosines (trains SDFT from the base and from the end per seed); ``validation``: the
    monitor's held-out validation (the ground truth evaluated while the chain trains its monitored ecom stage,
    per seed, or that stage retrained with the monitor when the chain's monitor does not score what it needs;
    ``lead_n`` items every ``lead_every`` steps, default :func:`lead_defaults`; ``lead_stage`` the stage
    watched, default ecom, else the last); ``signatures``: the drift signature of every phase, stage and consolidation
    on its parent's own generations (``signature_n`` per probe set, default
    :data:`aclarena.analysis.signatures.DEFAULT_N`, as the mini demo's).
    """
    from aclarena.train.curriculum import run_curriculum

    lead_n, lead_every = _check_options(cfg, seeds, n, lead_n, lead_every, lead_stage)
    stages = [s.domain for s in cfg.stages]
    out = Path(out)
    parts = Parts(on_start, on_part)
    times, errors, part, verb = parts.times, parts.errors, parts.part, parts.verb

    # the validation's ground truth rides the chain's own monitored stage: nothing is retrained for it
    riders = _validation_riders(cfg, seeds, stages, lead_n, lead_every, lead_stage) if validation else None
    trained = part("train", lambda: run_curriculum(cfg, out, seeds=seeds, show_progress=show_progress,
                                                   config_text=config_text, riders=riders))
    made_by = Trained.of(r.job for r in trained.records)
    reps = list(range(seeds))
    run = str(out)

    def evaluate() -> list[EvalResult | None]:
        # the findings read the chain on every suite and each oracle on its own domain's only: an oracle is
        # not scored on the other domains (it was never trained on them), an SFT phase's end not at all
        chain = [c for r in reps for d in stages if (c := made_by.end("stage", d, r)) is not None]
        res = [verb("eval", "eval", functools.partial(analyses.eval_cells, run, ["base", *chain], "id,general", n))]
        for d in stages:
            oracles = [c for r in reps if (c := made_by.end("oracle", d, r)) is not None and c not in chain]
            if oracles:
                res.append(verb("eval", "eval", functools.partial(analyses.eval_cells, run, oracles, f"{d}/id", n)))
        return res

    evals = part("eval", evaluate)
    drift: dict[int, DriftSummary] = {}

    part("tokens", lambda: _tokens(out, seeds, stages, made_by, n, verb, drift))
    disp = part("displacement", lambda: verb("displacement", "displacement", lambda: analyses.displacement(run)))
    seed_list = [cfg.seed + r for r in reps]
    made: list[Made] = []

    if consolidations:
        evals += part("consolidate", lambda: _consolidate(run, n, seeds, stages, consolidations, verb, made))
    cells = cells_of(*evals)
    rows = findings(seed_list, stages, made_by, cells, {} if disp is None else disp.stage_norms(), drift)
    rows += consolidation_rows(seed_list, stages, made_by, cells, made)
    if signatures:
        from aclarena.analysis.signatures import DEFAULT_N

        per_probe = DEFAULT_N if signature_n is None else signature_n
        signed_ = part("signatures", lambda: verb("signatures", "signatures",
                                                 lambda: analyses.signatures(run, per_probe)))
        rows += signature_rows(seed_list, stages, made_by, [] if signed_ is None else signed_.signed(), made)
        if signed_ is not None and signed_.failed:  # those updates' values are null in their rows, and say why here
            errors["signatures"] = "no signature for " + "; ".join(signed_.failed)

    if vectors:
        rows += part("vectors", lambda: _cosines(out, seeds, stages, made_by, seed_list, verb, errors))

    report = None
    if validation:
        report = part("validation", lambda: _validation(cfg, out, seeds, stages, lead_n, lead_every, show_progress,
                                                         lead_stage))
    result = StudyResult(out=out, seeds=seed_list, rows=rows, part_times=times, errors=errors, validation=report,
                         consolidations=list(consolidations))
    write_findings(result, command=command or f"aclarena-diag study --run {out} --seeds {seeds} -n {n}")
    return result


def _tokens(out: Path, seeds: int, stages: Sequence[str], trained: Trained, n: int, verb: Step,
            drift: dict[int, DriftSummary]) -> None:
    """Per replicate: freeze the math stage's generations, score the later checkpoints; the ecom stage's drift
    into ``drift``."""
    from aclarena.results.probes import list_probe_sets
    from aclarena.store import ResultsStore

    run = str(out)
    frozen = set(list_probe_sets(ResultsStore(out))) if (out / "results.h5").exists() else set()
    for r in range(seeds):
        ref, ecom = trained.end("stage", "math", r), trained.end("stage", "ecom", r)
        if ref is None or "ecom" not in stages:
            continue
        if ref not in frozen and verb(f"probe{suffix(r)}", "probe",
                                      functools.partial(analyses.probe, run, ref, "math", min(n, 32))) is None:
            continue
        data = verb(f"tokens{suffix(r)}", "tokens", functools.partial(analyses.tokens, run, ref))
        after = None if data is None or ecom is None else data.summaries.get(ecom)
        if after is not None:
            drift[r] = after


def _consolidate(run: str, n: int, seeds: int, stages: Sequence[str], methods: Sequence[str], verb: Step,
                 made: list[Made]) -> list[EvalResult | None]:
    """``consolidate --seeds N`` for each method (outputs appended to ``made``), then their in-domain scores."""
    for method in methods:
        res = verb(f"consolidate {method}", "consolidate",
                   functools.partial(analyses.consolidate, run, method, seeds=seeds))
        made.extend([] if res is None else res.made())
    shared = [o.checkpoint for o in made if o.method != "mle"]
    evals: list[EvalResult | None] = []
    if shared:
        evals.append(verb("eval consolidated", "eval", functools.partial(analyses.eval_cells, run, shared, "id", n)))
    for d in stages:  # an MLE expert answers the contexts routed to it: its own domain's suite
        experts = [o.checkpoint for o in made if o.method == "mle" and o.domain == d]
        if experts:
            evals.append(verb(f"eval mle-{d}", "eval",
                              functools.partial(analyses.eval_cells, run, experts, f"{d}/id", n)))
    return evals


def _cosines(out: Path, seeds: int, stages: Sequence[str], trained: Trained, seed_list: Sequence[int], verb: Step,
             errors: dict[str, str]) -> list[dict[str, Any]]:
    """SDFT (the oracle-mix SFT) from the base and from the end per replicate, one ``vectors`` pass, the rows."""
    from aclarena.store import load_manifest

    run = str(out)
    sdft: dict[int, dict[str, str]] = {}
    for start in ("base", "end"):
        res = verb(f"sdft --start {start}", "consolidate",
                   functools.partial(analyses.consolidate, run, "sdft", seeds=seeds, start=start))
        for o in [] if res is None else res.made():  # made or reused: each replicate's output
            sdft.setdefault(o.replicate, {})[start] = o.checkpoint
    known = {c.name for c in load_manifest(out)}
    mix, unrelated = vector_pairs(stages, seeds, trained, known, sdft=sdft)
    asked = [p for r in range(seeds) for p in ([mix[r]] if r in mix else []) + unrelated.get(r, [])]
    if not asked:
        errors["vectors"] = ("no pair to compare: SDFT from the base and from the end, and the oracles' SFT "
                             "phases, are missing (see the sdft steps' errors)")
        return cosine_rows(seed_list, {}, {})
    data = verb("vectors", "vectors", functools.partial(analyses.vectors, run, [pair_arg(p) for p in asked]))
    got = {} if data is None else data.asked_cosines()
    return cosine_rows(seed_list, {r: got.get(p) for r, p in mix.items()},
                       {r: [got.get(p) for p in ps] for r, ps in unrelated.items()})


def _lead_settings(cfg: Any, stages: Sequence[str], lead_n: int, lead_every: int, lead_stage: str | None,
                   replicates: int) -> list[Any]:
    """The validation's lead-time settings, one per replicate ([] for a one-stage curriculum): the ecom stage (or
    ``lead_stage``, else the last), the monitor scoring at least as often as the ground truth is evaluated (every
    evaluation sees a fresh value)."""
    from aclarena.train.lead_time import LeadTimeSettings

    stage = lead_stage or ("ecom" if "ecom" in stages[1:] else (stages[-1] if len(stages) > 1 else None))
    if stage is None:
        return []
    mon = getattr(cfg, "monitor", None)
    every = min(mon.every_n_steps if mon is not None else 5, lead_every)
    return [LeadTimeSettings(stage=stage, n=lead_n, eval_every=lead_every, every_n_steps=every, replicate=r)
            for r in range(replicates)]


def _validation_riders(cfg: Any, seeds: int, stages: Sequence[str], lead_n: int, lead_every: int,
                       lead_stage: str | None) -> Any:
    """The ground truth of every seed's validation, evaluated while the chain trains its monitored stage
    (:func:`aclarena.train.lead_time.ground_truth_riders`); None when there is no validation to ride along (one seed,
    one stage, no ``[monitor]``, or settings the validation will refuse and report)."""
    from aclarena.train.lead_time import ground_truth_riders

    settings = _lead_settings(cfg, stages, lead_n, lead_every, lead_stage, seeds)
    if seeds < 2 or not settings or getattr(cfg, "monitor", None) is None:
        return None
    try:
        return ground_truth_riders(cfg, settings)
    except AclarenaError:
        return None  # e.g. too few items for any significant drop: the validation says so, per seed


def _validation(cfg: Any, out: Path, seeds: int, stages: Sequence[str], lead_n: int, lead_every: int,
                show_progress: bool, lead_stage: str | None = None) -> dict[str, Any]:
    """The lead time of every seed (``monitor --lead-time`` on replicate r; read from the chain's own training when
    the ground truth rode along, :func:`_validation_riders`), then :func:`validation_report`."""
    from aclarena.train.lead_time import measure_lead_time

    seed_list = [cfg.seed + r for r in range(seeds)]
    settings = _lead_settings(cfg, stages, lead_n, lead_every, lead_stage, seeds)
    if not settings:
        return validation_report({}, cfg.seed, seeds=seed_list) | {
            "reason": "the curriculum has one stage: there is no earlier skill to lose"}
    stage, every = settings[0].stage, settings[0].every_n_steps
    leads: dict[int, dict[str, Any]] = {}
    errs: dict[int, str] = {}
    if seeds >= 2:
        for r in range(seeds):
            try:
                leads[cfg.seed + r] = measure_lead_time(out, settings[r], show_progress=show_progress)
            except AclarenaError as e:
                # monitor --lead-time's options are --lead-n and --lead-every here
                errs[cfg.seed + r] = re.sub(r"(^|\s|\()-n ", r"\1--lead-n ", str(e).splitlines()[0]).replace(
                    "--eval-every", "--lead-every")
                if r == 0:  # e.g. too few items for any significant drop: the same on every seed
                    break
            if r == 0 and not any(d.get("reachable") for d in leads[cfg.seed]["drop_test"]["domains"].values()):
                break  # no drop can be significant on the fit seed: nothing to fit, so the others are not measured
    rep = validation_report(leads, cfg.seed, seeds=seed_list, errors=errs)
    rep["stage"] = stage
    rep["settings"] = {"n": lead_n, "eval_every": lead_every, "monitor_every": every, "alpha": settings[0].alpha}
    return rep


def write_findings(result: StudyResult, *, command: str) -> Path:
    """``findings.json`` in the run folder, strict JSON, written whole then renamed."""
    from aclarena.reproducibility import made_by

    return analyses.write_report(result.out / FINDINGS_FILE, {**result.to_json(), "made_by": made_by(command)})
