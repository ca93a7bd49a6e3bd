"""Token drift of a run: teacher-forced entropy and drift of later checkpoints on a frozen probe set.

The work of ``aclarena-diag tokens``: every checkpoint scores the reference's frozen generations
teacher-forced; per position: entropy, log-prob of the reference token, top-k, exact
KL(p_ref || p_ckpt) and JS; per checkpoint: how drift splits between high- and low-entropy
positions. The reference's outputs are cached in the store (``tokens/<probe>/reference``) and a
finished checkpoint is skipped on a rerun (its settings and weights fingerprint match); each
checkpoint's scores and summary are written in one atomic write. Under torchrun the ranks share
the batches and rank 0 gathers and writes (:mod:`aclarena.distributed`).
"""

from __future__ import annotations

import functools
import gc
import os
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, overload

import numpy as np

from aclarena.analysis._common import RunPath, frame, manifest_or_load, options_of
from aclarena.analysis.probe import make_probe
from aclarena.diagnostics.token_drift import DriftSummary, HighEntropy, high_entropy_mask, summarize_drift
from aclarena.distributed import World, merge_rows
from aclarena.distributed import world as world_of
from aclarena.errors import AclarenaError, unknown_name
from aclarena.models import loading
from aclarena.models.checkpoint import CheckpointInfo, inspect, require_same_tokenizer
from aclarena.models.loading import LoadOptions
from aclarena.models.tensors import weights_fingerprint
from aclarena.probes.teacher_forcing import (
    STATUS_BEYOND_CONTEXT,
    BatchPlan,
    ReferenceStats,
    TokenScores,
    reference_outputs,
    score,
)
from aclarena.progress import progress, quiet_libraries
from aclarena.results import tokens as stored
from aclarena.results.probes import (
    ProbeSet,
    list_probe_sets,
    read_probe_set,
    require_probe_digest,
    write_probe_set,
)
from aclarena.results.tokens import (
    ScoresMeta,
    TokenReferenceData,
    TokenScoresData,
    TokenSummaryData,
    reference_key,
    scores_key,
    stored_settings,
    summary_key,
    write_token_results,
)
from aclarena.store import Manifest, ResultsStore, StoreReader

# the reference's arrays the ranks gather (position and token each rank knows from the probe set)
REF_GATHERED = tuple(f for f in stored.REFERENCE_FIELDS if f not in ("position", "token"))
# the per-position columns of TokenDrift.positions: column -> the reference's stored array
POSITION_REF = {"position": "position", "token": "token", "entropy_ref": "entropy", "logprob_ref": "logprob",
                "top1_ref": "top1"}
POSITION_SCORES = ("entropy", "logprob", "top1", "kl", "js", "status")


@dataclass(frozen=True)
class TokenDrift:
    """Token drift of later checkpoints against one reference on one probe set.

    ``rows``: one per checkpoint, the :class:`~aclarena.diagnostics.token_drift.DriftSummary`
    fields (no curve) plus ``checkpoint``, ``status`` (scored, cached, flagged...),
    ``n_nonfinite`` and ``n_beyond_context``; ``summaries`` the summaries themselves (with the
    concentration curve); ``writes`` the store keys this call wrote; ``warnings`` what the CLI
    prints on stderr.
    """

    run_dir: Path
    reference: str
    probe: str
    high: str
    eps: float
    n_positions: int
    n_sequences: int
    rows: tuple[dict[str, Any], ...]
    summaries: Mapping[str, DriftSummary]
    warnings: tuple[str, ...] = ()
    writes: tuple[str, ...] = field(default=())

    @property
    def checkpoints(self) -> list[str]:
        return [r["checkpoint"] for r in self.rows]

    @property
    def flagged(self) -> list[dict[str, Any]]:
        """Rows of checkpoints with NaN/inf logits at some positions (kept out of their summaries)."""
        return [r for r in self.rows if r["n_nonfinite"]]

    def flagged_message(self) -> str | None:
        """One line naming the checkpoints with NaN/inf logits (``tokens`` then exits 1), None if there are none."""
        if not self.flagged:
            return None
        names = ", ".join(f"{r['checkpoint']!r} ({r['n_nonfinite']} positions)" for r in self.flagged)
        return (f"NaN or infinite logits in {names}; those positions are flagged in the store and kept out of the "
                "summaries")

    def summary(self) -> Any:
        """DataFrame, one row per checkpoint: KL mean (all, high, low), KL share high, flips, barely moved..."""
        return frame(self.rows)

    def to_pandas(self) -> Any:
        """The same as :meth:`summary`."""
        return self.summary()

    def positions(self, checkpoint: str) -> Any:
        """DataFrame, one row per scored position of the probe set, read from the store: ``sequence``,
        ``position`` (token index in its sequence), ``token`` (the reference's token), the reference's
        ``entropy_ref``, ``logprob_ref``, ``top1_ref``, the checkpoint's ``entropy``, ``logprob``,
        ``top1``, ``kl``, ``js``, ``status`` (0 = valid) and ``high`` (in the high-entropy set of this
        result). The same columns as :meth:`ModelDrift.positions <aclarena.analysis.in_memory.ModelDrift.positions>`."""
        if checkpoint not in self.summaries:
            raise unknown_name("scored checkpoint", checkpoint, list(self.summaries))
        import pandas as pd

        store = ResultsStore(self.run_dir)
        with store.reader() as r:
            ref = stored.reference_columns(r, self.probe, POSITION_REF.values())
            cols = {name: ref[f] for name, f in POSITION_REF.items()}
            cols |= stored.scores_columns(r, self.probe, checkpoint, POSITION_SCORES)
            offsets = stored.row_offsets(r, self.probe)
        lengths = np.diff(offsets)
        out = pd.DataFrame({"sequence": np.repeat(np.arange(len(lengths)), lengths), **cols})
        # the high-entropy set as the summaries choose it: among positions where the reference is finite
        h, lp = cols["entropy_ref"].astype(np.float64), cols["logprob_ref"].astype(np.float64)
        ok = np.isfinite(h) & np.isfinite(lp)
        high = np.zeros(h.shape, dtype=bool)
        high[np.flatnonzero(ok)[high_entropy_mask(h[ok], HighEntropy.parse(self.high))[0]]] = True
        out["high"] = high
        return out

    def to_dict(self) -> dict[str, Any]:
        """Plain data: what ``aclarena-diag tokens --json`` prints."""
        return {"reference": self.reference, "probe": self.probe, "high": self.high, "eps": self.eps,
                "positions": self.n_positions, "sequences": self.n_sequences, "checkpoints": [dict(r) for r in self.rows],
                "warnings": list(self.warnings)}


# --- helpers ----------------------------------------------------------------------------------


def require_same_generator(probe_set: ProbeSet, ref: str, weights: str) -> None:
    """A probe set generated by ``ref`` records the fingerprint of the weights that generated it (issue 43); when
    ``ref``'s weights have changed since, its sequences are no longer ``ref``'s generations and every score on them
    would answer from stale input: one line. Traces and probe sets of earlier versions record none."""
    made_by = probe_set.settings.get("reference_weights")
    if isinstance(made_by, str) and made_by != weights:
        raise AclarenaError(f"probe set {probe_set.name!r} was generated by {ref!r}'s weights as they were then "
                            f"(fingerprint {made_by}); they have changed since ({weights}), so its sequences are no "
                            f"longer {ref!r}'s generations: rerun `aclarena-diag probe --ref {ref} --force`")


def untokenized_note(infos: dict[str, CheckpointInfo], ref: str) -> list[str]:
    """One line per full checkpoint without tokenizer files compared with a reference that has them: its tokenizer
    is assumed to be the reference's, which nothing could check (it was compared without a word before)."""
    if infos[ref].tokenizer_fingerprint is None:
        return []
    return [f"checkpoint {n!r} has no tokenizer files, so it is assumed to use {ref!r}'s tokenizer (not checked); "
            "copy the tokenizer files into its folder to have it checked"
            for n, i in infos.items() if n != ref and i.tokenizer_fingerprint is None and i.source != "adapter"]


def targets_of(manifest: Manifest, ref: str, against: str | Sequence[str]) -> list[str]:
    """The checkpoints to score against ``ref``: ``later`` (its descendants and, for a base or stage,
    the consolidations of its replicate), ``all``, or names (a list or comma-separated)."""
    if not isinstance(against, str):
        against = ",".join(against)
    if against == "later":
        names = manifest.descendants(ref)
        spec = manifest.resolve(ref)
        if spec.kind in ("base", "stage"):
            # consolidations are made from the whole chain, so they come after each of its stages
            # (those of the same replicate when seeds are recorded), whatever their `parent`
            names += [s.name for s in manifest if s.kind == "consolidated" and s.name not in names and s.name != ref
                      and (s.seed is None or spec.seed is None or s.seed == spec.seed)]
        if not names:
            raise AclarenaError(
                f"checkpoint {ref!r} has no later checkpoints (none has it as an ancestor in the manifest); "
                "pass --against NAMES or --against all, or set `parent` in aclarena.toml"
            )
        return names
    if against == "all":
        names = [s.name for s in manifest if s.name != ref]
        if not names:
            raise AclarenaError(f"the run has no checkpoint besides {ref!r} to score")
        return names
    names = [s.name for s in manifest.resolve_many(against)]
    if not names:
        raise AclarenaError("--against names no checkpoint; give later, all, or comma-separated names")
    return list(dict.fromkeys(names))


def summarize_stored(reader: StoreReader, probe: str, ckpt: str, high: HighEntropy, eps: float) -> DriftSummary:
    """The summary of a stored checkpoint's scores (flat arrays read from the store)."""
    ref = stored.reference_columns(reader, probe, ("entropy", "logprob", "top1"))
    sc = stored.scores_columns(reader, probe, ckpt, ("kl", "js", "logprob", "top1", "status"))
    return summarize_drift(
        ref["entropy"], ref["logprob"], ref["top1"], sc["kl"], sc["js"], sc["logprob"], sc["top1"],
        high=high, eps=eps, valid=sc["status"] == 0,
    )


def _row(name: str, summary: DriftSummary, status: str, meta: ScoresMeta | None = None) -> dict[str, Any]:
    d = summary.to_dict()
    d.pop("curve_x", None)
    d.pop("curve_y", None)
    out = {"checkpoint": name, "status": status} | d
    if meta is not None:
        out["n_nonfinite"] = meta.n_nonfinite
        out["n_beyond_context"] = meta.n_beyond_context
    return out


def reference_payload(probe: str, ref: str, stats: ReferenceStats, offsets: np.ndarray,
                      settings: dict[str, Any]) -> TokenReferenceData:
    """The stored reference of teacher forcing's reference statistics (flat arrays over ``offsets``)."""
    return TokenReferenceData(probe=probe, reference=ref, settings=settings, n_positions=int(offsets[-1]),
                              n_invalid=int((stats.status != 0).sum()), offsets=offsets,
                              **{k: getattr(stats, k) for k in stored.REFERENCE_FIELDS})


def scores_payload(probe: str, scores: TokenScores, meta: ScoresMeta) -> TokenScoresData:
    """The stored scores of one checkpoint's teacher-forced scores."""
    return TokenScoresData(probe=probe, meta=meta, offsets=scores.offsets,
                           **{k: getattr(scores, k) for k in stored.SCORE_FIELDS})


def _gather_rows(w: World, plan: Any, mine: list[int], obj: Any, fields: tuple[str, ...]) -> None:
    """Rank 0: fill ``obj``'s flat arrays with the other ranks' positions (their batches)."""
    if not w.distributed:
        return
    index = plan.positions_of(mine)
    parts = w.gather((index, {k: getattr(obj, k)[index] for k in fields}))
    if parts is not None:
        merge_rows(parts[1:], {k: getattr(obj, k) for k in fields})


@dataclass(frozen=True)
class TokensOptions:
    """How ``tokens`` scores (``aclarena-diag tokens``'s options, checked when made).

    ``probe``: the probe set (default: the one named like the reference; made with defaults from its domain
    when missing); ``against``: ``later`` (every descendant of the reference and every consolidated
    checkpoint), ``all`` or checkpoint names; ``high``: ``q=FRACTION`` or ``nats=THRESHOLD``; ``eps``: the
    |Δ log-prob| below which a position barely moves; ``batch_size``, ``chunk_size`` (positions per
    output-head chunk, None: sized to memory) and ``topk`` of the scoring; ``force``: rescore finished
    checkpoints; ``load``: how checkpoints are loaded.
    """

    probe: str | None = None
    against: str | tuple[str, ...] = "later"
    high: HighEntropy | str = "q=0.06"
    eps: float = 0.05
    batch_size: int = 8
    chunk_size: int | None = None
    topk: int = 5
    force: bool = False
    load: LoadOptions = field(default_factory=LoadOptions)

    def __post_init__(self) -> None:
        if isinstance(self.high, str):
            try:
                object.__setattr__(self, "high", HighEntropy.parse(self.high))
            except ValueError as e:
                raise AclarenaError(f"--high: {e}") from None
        if not isinstance(self.against, str):
            object.__setattr__(self, "against", tuple(self.against))
        if not (self.eps > 0):
            raise AclarenaError(f"--eps must be > 0, got {self.eps}")
        for opt, value in (("--batch-size", self.batch_size), ("--topk", self.topk), ("--chunk-size", self.chunk_size)):
            if value is not None and value < 1:
                raise AclarenaError(f"{opt} must be at least 1, got {value}")

    @property
    def high_entropy(self) -> HighEntropy:
        assert isinstance(self.high, HighEntropy)  # parsed when made
        return self.high


# --- the analysis -----------------------------------------------------------------------------


@overload
def tokens(run_dir: RunPath, ref: str, options: TokensOptions | None = None, *, world: None = None,
           show_progress: bool = False, manifest: Manifest | None = None, **settings: Any) -> TokenDrift: ...


@overload
def tokens(run_dir: RunPath, ref: str, options: TokensOptions | None = None, *, world: World,
           show_progress: bool = False, manifest: Manifest | None = None, **settings: Any) -> TokenDrift | None: ...


def tokens(
    run_dir: RunPath,
    ref: str,
    options: TokensOptions | None = None,
    *,
    world: World | None = None,
    show_progress: bool = False,
    manifest: Manifest | None = None,
    **settings: Any,
) -> TokenDrift | None:
    """Score the checkpoints ``options.against`` (default: those after ``ref``) on ``ref``'s probe set.

    ``options`` (:class:`TokensOptions`), or its fields as keywords (``probe=...``, ``high="q=0.1"``).
    Finished checkpoints are reused unless ``force``. Returns the summaries; the per-position arrays
    stay in the store (:meth:`TokenDrift.positions` reads them). In a data-parallel ``world`` (see
    :func:`aclarena.distributed.world`; ``aclarena-diag tokens`` under torchrun) the ranks share the
    batches and rank 0 gets the result, the other ranks None; without one, one process does it all.
    """
    o = options_of(TokensOptions, options, settings)
    if world is None:
        with world_of(o.load.device) as w:
            out = _tokens(run_dir, ref, o, w, show_progress, manifest)
        assert out is not None  # one process is rank 0
        return out
    return _tokens(run_dir, ref, o, world, show_progress, manifest)


def _tokens(run_dir: RunPath, ref: str, o: TokensOptions, w: World, show_progress: bool,  # noqa: C901
            manifest: Manifest | None) -> TokenDrift | None:
    load, probe, force, high, eps = o.load, o.probe, o.force, o.high_entropy, o.eps
    show_progress = show_progress and w.is_main
    quiet_libraries()
    manifest = manifest_or_load(run_dir, manifest)
    ref = manifest.resolve(ref).name
    targets = targets_of(manifest, ref, o.against)
    infos = {n: inspect(manifest.resolve(n), manifest, run_dir, allow_pickle=load.allow_pickle)
             for n in dict.fromkeys([ref, *targets])}
    for info in infos.values():
        info.require_loadable()
    require_same_tokenizer(list(infos.values()))
    store = ResultsStore(run_dir)
    # rank 0 alone reads and writes the store; the other ranks get what they need from it
    probes = w.run_main(lambda: list_probe_sets(store))
    probe_name = probe or ref
    manifest_text = manifest.to_toml()
    warnings: list[str] = untokenized_note(infos, ref)
    writes: list[str] = []
    if probe_name not in probes:
        if probe:
            raise unknown_name("probe set", probe, probes, hint=f"make one with `aclarena-diag probe --ref {ref}`")
        domain = manifest.resolve(ref).domain
        if not domain:
            raise AclarenaError(
                f"checkpoint {ref!r} has no probe set and no domain in the manifest to make one from; run "
                f"`aclarena-diag probe --ref {ref} --prompts FILE.jsonl` (or --from-traces) first"
            )
        made = make_probe(str(run_dir), manifest, ref, probe_name, domain=domain, show_progress=show_progress,
                          load=load, world=w)
        w.run_main(lambda: write_probe_set(store, made, manifest_text=manifest_text))  # rank 0 writes, all wait
        if w.is_main:
            warnings += made.warnings
            writes.append(f"probes/{probe_name}")

    def read_probe() -> ProbeSet:
        found = read_probe_set(store, probe_name, with_text=False)
        if found.reference != ref:
            raise AclarenaError(f"probe set {probe_name!r} holds generations of {found.reference!r}, not {ref!r}; "
                                f"pass --ref {found.reference} or another --probe")
        return found

    probe_set = w.run_main(read_probe)
    base_settings = {"probe": probe_name, "probe_digest": probe_set.digest, "reference": ref,
                     "reference_weights": weights_fingerprint(infos[ref], manifest, run_dir),
                     "topk": o.topk, "dtype": load.dtype, "scoring_version": "1"}
    require_same_generator(probe_set, ref, str(base_settings["reference_weights"]))

    def ckpt_settings(name: str) -> dict[str, Any]:
        return base_settings | {"checkpoint": name, "weights": weights_fingerprint(infos[name], manifest, run_dir)}

    def plan() -> tuple[list[str], bool]:
        todo = []
        with_store = store.exists()
        for name in targets:
            key = scores_key(probe_name, name)
            if force or not (with_store and store.has(key)
                             and stored_settings(store, key) == ckpt_settings(name)):
                todo.append(name)
        ref_ok = with_store and store.has(reference_key(probe_name)) and \
            stored_settings(store, reference_key(probe_name)) == base_settings
        return todo, bool(ref_ok)

    todo, ref_ok = w.run_main(plan)
    statuses: dict[str, str] = {n: "cached" for n in targets if n not in todo}
    if todo or not ref_ok:
        _score(run_dir, manifest, store, probe_set, ref, todo, base_settings, ckpt_settings, high, statuses,
               warnings, writes, manifest_text, o, show_progress, write_reference=not ref_ok, world=w)
    if not w.is_main:
        return None
    # summaries: recompute where the settings (high, eps) or the scores changed
    rows = []
    summaries: dict[str, DriftSummary] = {}
    items: list[TokenSummaryData] = []
    with store.reader() as r:
        for name in targets:
            mkey = summary_key(probe_name, name)
            meta = stored.read_scores_meta(r, probe_name, name)
            want = {"high": str(high), "eps": eps, "scores_id": meta.scores_id}
            if r.has(mkey) and stored_settings(r, mkey) == want:
                summary = DriftSummary.from_dict(stored.read_summary(r, probe_name, name).summary)
            else:
                summary = summarize_stored(r, probe_name, name, high, eps)
                items.append(TokenSummaryData(probe=probe_name, checkpoint=name, reference=ref, settings=want,
                                              summary=summary.to_dict()))
            status = statuses.get(name, "cached")
            if meta.n_nonfinite:
                status = f"flagged: {meta.n_nonfinite} NaN/inf positions"
            rows.append(_row(name, summary, status, meta))
            summaries[name] = summary
    writes += write_token_results(store, items, manifest_text=manifest_text)
    return TokenDrift(run_dir=Path(os.fspath(run_dir)), reference=ref, probe=probe_name, high=str(high), eps=eps,
                      n_positions=probe_set.n_scored, n_sequences=probe_set.n_sequences, rows=tuple(rows),
                      summaries=summaries, warnings=tuple(warnings), writes=tuple(dict.fromkeys(writes)))


def _score(run_dir: RunPath, manifest: Manifest, store: ResultsStore, probe: ProbeSet, ref: str, todo: list[str],
           base_settings: dict[str, Any], ckpt_settings: Callable[[str], dict[str, Any]], high: HighEntropy,
           statuses: dict[str, str], warnings: list[str], writes: list[str], manifest_text: str, o: TokensOptions,
           show_progress: bool, *,
           write_reference: bool, world: World) -> None:
    """Score ``todo`` against ``ref``; with several ranks each computes its round-robin share of the
    batches (the same batches as one process) and rank 0 gathers and writes."""
    w = world
    probe_name = probe.name
    same_probe = require_probe_digest(probe_name, probe.digest)  # checked under the writer lock
    opts = replace(o.load, merge_adapter=True)
    opts = replace(opts, device=w.device(opts.device))
    batches = BatchPlan.make(probe, o.batch_size).batches
    mine = w.mine(len(batches))
    share = sum(len(batches[b]) for b in mine)
    with progress(show_progress) as bar:
        task = bar.add_task(f"reference {ref}", total=share)

        def reference_pass() -> Any:
            ref_model = loading.load_model(ref, manifest, run_dir, opts)  # looked up at call time (tests patch it)
            out = reference_outputs(ref_model, probe, name=ref, batch_size=o.batch_size,
                                    chunk_size=o.chunk_size, topk=o.topk,
                                    progress=lambda k: bar.advance(task, k), batches=mine)
            del ref_model
            gc.collect()
            return out

        cache = w.each(reference_pass)
        _gather_rows(w, cache.plan, mine, cache.stats, REF_GATHERED)
        offsets = cache.plan.offsets
        # the reference's outputs go with the first checkpoint's scores: a checkpoint that cannot be
        # scored (NaN weights, say) then leaves the store as it was
        ref_items: list[Any] = []
        if write_reference and w.is_main:
            ref_items = [reference_payload(probe_name, ref, cache.stats, offsets, base_settings)]
        for name in todo:
            bar.update(task, description=f"scoring {name}", completed=0, total=share)

            def score_one(name: str = name) -> Any:
                model = loading.load_model(name, manifest, run_dir, opts)
                out = score(model, cache, probe, name=name, progress=lambda k: bar.advance(task, k), batches=mine)
                del model
                gc.collect()
                return out

            res = w.each(score_one)
            _gather_rows(w, cache.plan, mine, res, stored.SCORE_FIELDS)
            if not w.is_main:
                w.run_main(lambda: None)  # wait for rank 0's write (and fail with it)
                continue
            summary = summarize_drift(cache.stats.entropy, cache.stats.logprob, cache.stats.top1, res.kl, res.js,
                                      res.logprob, res.top1, high=high, eps=o.eps, valid=res.status == 0)
            beyond = int((res.status == STATUS_BEYOND_CONTEXT).sum())
            if beyond:
                warnings.append(f"{name}: {beyond} scored positions lie beyond its maximum positions "
                                f"({res.info.get('positions_limit')}); they are left out of its summary")
            scores_id = uuid.uuid4().hex[:16]
            meta = ScoresMeta(checkpoint=name, reference=ref, settings=ckpt_settings(name), scores_id=scores_id,
                              n_nonfinite=res.n_nonfinite, n_beyond_context=beyond, batch_size=cache.batch_size,
                              chunk_size=cache.chunk_size)
            # one atomic write per checkpoint: a kill leaves it either fully scored or not at all
            items = [
                *ref_items,
                scores_payload(probe_name, res, meta),
                TokenSummaryData(probe=probe_name, checkpoint=name, reference=ref,
                                 settings={"high": str(high), "eps": o.eps, "scores_id": scores_id},
                                 summary=summary.to_dict()),
            ]
            ref_items = []
            w.run_main(functools.partial(write_token_results, store, items, manifest_text=manifest_text,
                                         precondition=same_probe))
            writes += [stored.key_of(p) for p in items]
            statuses[name] = "scored"
        if write_reference and not todo:
            w.run_main(functools.partial(write_token_results, store, ref_items, manifest_text=manifest_text,
                                         precondition=same_probe))
            writes += [stored.key_of(p) for p in ref_items]
