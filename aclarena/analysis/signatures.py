"""Phase-resolved drift signatures: what each update of a run (SFT phase, RL phase, stage, consolidation)
did to its parent's distribution, on the parent's own frozen generations of the update's domain.

The work of ``aclarena-diag signatures`` (docs/tokens.md, "Drift signatures of updates"). For every
update ``parent -> child``:

1. the parent's greedy generations of the update's domain are frozen as the probe set
   ``<parent>.<domain>`` (made with :func:`aclarena.analysis.probe.make_probe` when missing, on the
   prompts of the run's own suites of that domain when the manifest has any, else on the mini
   arena's tasks of that name, and a note says which; a probe set of that name stored by
   ``aclarena-diag probe --name`` is used as it is);
2. the child scores it teacher-forced against the parent (:func:`aclarena.analysis.tokens.tokens`:
   per-position entropy, exact KL, log-probs, flips, cached in the store and reused);
3. the signature (:func:`aclarena.diagnostics.signatures.drift_signature`): KL share at the top 6%
   entropy positions, low-entropy positions barely moved, KL share at the first ``k`` reply tokens,
   flip rates high/low, concentration area, mean KL, each with a bootstrap interval over sequences.

The question it answers is the issue-31 one: the study's token finding (forgetting concentrated
at ~6% high-entropy decision points, ~94% of positions barely moving) is a signature of on-policy
updates (Retaining by Doing, arXiv 2510.18874; RL's Razor, arXiv 2509.04259), so an SFT phase on
expert demonstrations and an RL phase should be measured apart, not pooled into a stage end.

Updates (:func:`resolve_updates`): each checkpoint with a parent of kind ``stage`` (its ``phase``,
``sft`` or ``rl``, names the update), each stage of more than one phase as ``<start>..<end>``, and
each ``consolidated`` checkpoint (on every domain of the chain, or its own ``domain``). Oracles
and any other pair are named explicitly: ``--updates oracle-math,base..seq-search``.
Results go to ``signatures/<update>/<domain>`` (docs/store-format.md), all in one atomic write.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from aclarena.analysis._common import RunPath, frame, manifest_or_load, num, options_of
from aclarena.diagnostics.signatures import (
    DEFAULT_FIRST_K,
    DEFAULT_N_BOOT,
    MEASURES,
    MIN_SEQUENCES,
    DriftSignature,
    TooFewPositions,
    drift_signature,
    reply_index,
)
from aclarena.diagnostics.token_drift import HighEntropy
from aclarena.errors import AclarenaError
from aclarena.models.loading import LoadOptions
from aclarena.results.signatures import (
    SignatureData,
    read_signature,
    settings_of,
    signature_key,
    write_signatures,
)
from aclarena.results.tokens import read_scores_meta, reference_columns, row_offsets, scores_columns
from aclarena.store import Manifest, ResultsStore

DEFAULT_N = 32
DEFAULT_MAX_NEW_TOKENS = 64
PHASE_KINDS = ("sft", "rl")


@dataclass(frozen=True)
class Update:
    """One update ``parent -> child``: its handle (``name``), what it is (``kind``: sft, rl, stage,
    consolidation, or update for any other pair) and the domains it is measured on."""

    name: str
    kind: str
    parent: str
    child: str
    domains: tuple[str, ...]


def probe_name(parent: str, domain: str) -> str:
    """The probe set holding ``parent``'s frozen generations of ``domain``."""
    return f"{parent}.{domain}"


def _chain_domains(manifest: Manifest, seed: int | None) -> tuple[str, ...]:
    """The domains of the sequential stages (of replicate ``seed`` when seeds are recorded), in order."""
    out = [s.domain for s in manifest if s.kind == "stage" and s.domain
           and (seed is None or s.seed is None or s.seed == seed)]
    return tuple(dict.fromkeys(d for d in out if d))


def _update_into(manifest: Manifest, name: str) -> Update:
    spec = manifest.resolve(name)
    if spec.parent is None:
        raise AclarenaError(f"checkpoint {spec.name!r} has no parent in aclarena.toml, so no update made it; name a "
                            f"pair as PARENT..{spec.name}, or set `parent`")
    if spec.kind == "consolidated":
        kind = "consolidation"
        domains = (spec.domain,) if spec.domain else _chain_domains(manifest, spec.seed)
    else:
        kind = spec.phase if spec.phase in PHASE_KINDS else "update"
        domains = (spec.domain,) if spec.domain else ()
    return Update(spec.name, kind, spec.parent, spec.name, domains)


def _pair(manifest: Manifest, text: str) -> Update:
    a, _, b = text.partition("..")
    pa, pb = manifest.resolve(a.strip()), manifest.resolve(b.strip())
    if pa.name not in manifest.ancestors(pb.name):
        raise AclarenaError(f"update {text!r}: {pb.name!r} does not descend from {pa.name!r} in aclarena.toml; "
                            "name an ancestor first (PARENT..CHILD)")
    chain = manifest.ancestors(pb.name)
    path = [pb, *(manifest.resolve(c) for c in chain[:chain.index(pa.name)])]  # the checkpoints after pa
    stage = all(s.kind == "stage" and s.domain == pb.domain for s in path) and pb.domain is not None
    domains = (pb.domain,) if pb.domain else (_chain_domains(manifest, pb.seed) if pb.kind == "consolidated" else ())
    return Update(f"{pa.name}..{pb.name}", "stage" if stage else "update", pa.name, pb.name, domains)


def _stages(manifest: Manifest) -> list[Update]:
    """Each stage of more than one phase, as ``<stage start>..<stage end>``."""
    out = []
    for spec in manifest:
        if spec.kind != "stage" or not spec.domain:
            continue
        same = [c for c in manifest.children(spec.name)
                if manifest.resolve(c).kind == "stage" and manifest.resolve(c).domain == spec.domain]
        if same:
            continue  # not the stage's end
        first = spec
        while first.parent is not None:
            up = manifest.resolve(first.parent)
            if up.kind != "stage" or up.domain != spec.domain:
                break
            first = up
        if first.name != spec.name and first.parent is not None:
            out.append(Update(f"{first.parent}..{spec.name}", "stage", first.parent, spec.name, (spec.domain,)))
    return out


def resolve_updates(manifest: Manifest, which: str | Sequence[str] | None = None) -> list[Update]:
    """The updates to sign: ``which`` names them (a checkpoint = the update into it, ``A..B`` = the pair;
    a list or comma-separated), or None for every stage phase, every multi-phase stage and every
    consolidation of the run."""
    if which is not None:
        items = [w.strip() for w in (which.split(",") if isinstance(which, str) else which) if w.strip()]
        if not items:
            raise AclarenaError("--updates names no update; give checkpoint names or PARENT..CHILD pairs, "
                                "comma-separated")
        updates = [_pair(manifest, w) if ".." in w else _update_into(manifest, w) for w in items]
    else:
        phases = [_update_into(manifest, s.name) for s in manifest if s.kind == "stage" and s.parent is not None]
        cons = [_update_into(manifest, s.name) for s in manifest if s.kind == "consolidated" and s.parent is not None]
        updates = phases + _stages(manifest) + cons
        if not updates:
            raise AclarenaError("the run has no update to sign: no stage or consolidated checkpoint with a `parent` in "
                                "aclarena.toml; name pairs with --updates PARENT..CHILD")
    seen: dict[str, Update] = {}
    for u in updates:
        seen.setdefault(u.name, u)
    return list(seen.values())


@dataclass(frozen=True)
class Signed:
    """One update signed on one domain (:meth:`SignaturesResult.signed`): the update as ``signatures`` names it,
    its kind (``sft``, ``rl``, ``stage``, ``consolidation``), parent, child, domain and its
    :class:`~aclarena.diagnostics.signatures.DriftSignature`."""

    update: str
    kind: str
    parent: str
    child: str
    domain: str
    signature: DriftSignature

    def value(self, measure: str) -> float | None:
        return num(self.signature.values.get(measure))

    def interval(self, measure: str) -> tuple[float | None, float | None]:
        return num(self.signature.low.get(measure)), num(self.signature.high.get(measure))


@dataclass(frozen=True)
class SignaturesResult:
    """The drift signatures of a run's updates.

    ``rows``: one per (update, domain): ``update``, ``kind``, ``parent``, ``child``, ``domain``,
    ``probe``, counts, the chance shares, and each measure with ``<measure>_low`` /
    ``<measure>_high`` (its interval); ``signatures`` the typed results by ``(update, domain)``.
    """

    run_dir: Path
    settings: Mapping[str, Any]
    rows: tuple[dict[str, Any], ...]
    signatures: Mapping[tuple[str, str], DriftSignature]
    warnings: tuple[str, ...] = ()
    writes: tuple[str, ...] = field(default=())
    failed: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()  # where each probe set made now took its prompts from

    def to_pandas(self) -> Any:
        """DataFrame, one row per (update, domain)."""
        return frame(self.rows)

    def signed(self) -> list[Signed]:
        """Every signed (update, domain), in order, typed."""
        return [Signed(r["update"], r["kind"], r["parent"], r["child"], r["domain"],
                       self.signatures[(r["update"], r["domain"])]) for r in self.rows]

    def to_dict(self) -> dict[str, Any]:
        """Plain data: what ``aclarena-diag signatures --json`` prints."""
        return {"settings": dict(self.settings), "updates": [dict(r) for r in self.rows],
                "warnings": list(self.warnings), "failed": list(self.failed), "notes": list(self.notes)}


def _row(u: Update, domain: str, probe: str, sig: DriftSignature, status: str) -> dict[str, Any]:
    row: dict[str, Any] = {"update": u.name, "kind": u.kind, "parent": u.parent, "child": u.child, "domain": domain,
                           "probe": probe, "n_sequences": sig.n_sequences, "n_valid": sig.n_valid,
                           "n_high": sig.n_high, "n_first_k": sig.n_first_k, "high_share": sig.high_share,
                           "first_k_share": sig.first_k_share}
    for m in MEASURES:
        row[m], row[f"{m}_low"], row[f"{m}_high"] = sig.values[m], sig.low[m], sig.high[m]
    row["status"] = status
    return row


def _arrays(store: ResultsStore, probe: str, child: str) -> dict[str, np.ndarray]:
    with store.reader() as r:
        offsets = np.asarray(row_offsets(r, probe))
        ref = reference_columns(r, probe, ("entropy", "logprob", "top1", "position"))
        out = {f"ref_{k}": v for k, v in ref.items()}
        out |= scores_columns(r, probe, child, ("kl", "logprob", "top1", "status"))
    out["offsets"] = offsets
    return out


@dataclass(frozen=True)
class SignaturesOptions:
    """How ``signatures`` signs the updates (``aclarena-diag signatures``'s options, checked when made).

    ``updates``: the update names (default: every SFT and RL phase, multi-phase stage and consolidation);
    ``n`` prompts per missing probe set (greedy, ``max_new_tokens`` each); ``first_k`` the reply tokens that
    count as a reply's start; ``high`` (``q=FRACTION`` or ``nats=THRESHOLD``) and ``eps`` as ``tokens``;
    ``n_boot`` resamples of the sequences for ``level`` intervals, drawn with ``seed``; ``batch_size`` of
    the scoring; ``force`` recomputes the signatures; ``load``: how checkpoints are loaded.
    """

    updates: str | tuple[str, ...] | None = None
    n: int = DEFAULT_N
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS
    first_k: int = DEFAULT_FIRST_K
    high: HighEntropy | str = "q=0.06"
    eps: float = 0.05
    n_boot: int = DEFAULT_N_BOOT
    level: float = 0.95
    seed: int = 0
    batch_size: int = 8
    force: bool = False
    load: LoadOptions = field(default_factory=LoadOptions)

    def __post_init__(self) -> None:
        if self.updates is not None and not isinstance(self.updates, str):
            object.__setattr__(self, "updates", tuple(self.updates))
        if isinstance(self.high, str):
            try:
                object.__setattr__(self, "high", HighEntropy.parse(self.high))
            except ValueError as e:
                raise AclarenaError(f"--high: {e}") from None
        for opt, value, low in (("-n", self.n, MIN_SEQUENCES), ("--first-k", self.first_k, 1),
                                ("--n-boot", self.n_boot, 100), ("--max-new-tokens", self.max_new_tokens, 1),
                                ("--batch-size", self.batch_size, 1)):
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise AclarenaError(f"{opt} must be an integer >= {low}, got {value!r}")
        if not (0 < self.level < 1):
            raise AclarenaError(f"--level must be in (0, 1), got {self.level!r}")
        if not (self.eps > 0):
            raise AclarenaError(f"--eps must be > 0, got {self.eps!r}")

    @property
    def high_entropy(self) -> HighEntropy:
        assert isinstance(self.high, HighEntropy)  # parsed when made
        return self.high


def signatures(
    run_dir: RunPath,
    options: SignaturesOptions | None = None,
    *,
    show_progress: bool = False,
    manifest: Manifest | None = None,
    strict: bool = True,
    **settings: Any,
) -> SignaturesResult:
    """Sign every update of the run (or ``options.updates``); see the module docstring and
    :class:`SignaturesOptions` (or its fields as keywords).

    Scores and signatures already stored with the same settings are reused (``force`` recomputes the
    signatures; scores follow the ``tokens`` verb's reuse rule). ``strict=False`` (the demo's and the
    study's way) returns the signatures that could be computed and names each update that has none in
    ``failed`` (e.g. an RL phase whose every group scored alike, so it did not move: KL 0, no drift to
    locate) instead of raising.

    Raises:
        AclarenaError: an update without a domain, a parent with no generations of the domain (no
            probe set and not an arena domain), too few positions for an interval: one line. The
            signatures that could be computed are written first.
    """
    o = options_of(SignaturesOptions, options, settings)
    updates, n, max_new_tokens, first_k, eps = o.updates, o.n, o.max_new_tokens, o.first_k, o.eps
    n_boot, level, seed, batch_size, force, load = o.n_boot, o.level, o.seed, o.batch_size, o.force, o.load
    parsed_high = o.high_entropy
    manifest = manifest_or_load(run_dir, manifest)
    todo = resolve_updates(manifest, updates)
    store = ResultsStore(run_dir)
    _check_generations(store, todo, manifest)
    text = manifest.to_toml()
    warnings: list[str] = []
    writes: list[str] = []
    notes: list[str] = []
    scores_ids = _score(run_dir, store, manifest, todo, n=n, max_new_tokens=max_new_tokens, high=parsed_high,
                        eps=eps, batch_size=batch_size, load=load, show_progress=show_progress, warnings=warnings,
                        writes=writes, notes=notes)
    settings = {"high": str(parsed_high), "eps": float(eps), "first_k": first_k, "n_boot": n_boot,
                "level": float(level), "seed": seed}
    rows: list[dict[str, Any]] = []
    sigs: dict[tuple[str, str], DriftSignature] = {}
    payloads: list[SignatureData] = []
    failed: list[str] = []
    for u in todo:
        for d in u.domains:
            probe = probe_name(u.parent, d)
            key = signature_key(u.name, d)
            want = settings | {"scores_id": scores_ids[(probe, u.child)], "probe": probe}
            sig = None if force else _stored(store, key, want)
            status = "cached"
            if sig is None:
                status = "computed"
                try:
                    sig = _sign(store, probe, u.child, parsed_high, settings)
                except TooFewPositions as e:
                    failed.append(f"{u.name} on {d} ({probe}): {e}")
                    continue
                payloads.append(_payload(u, d, probe, sig, want, seed))
            rows.append(_row(u, d, probe, sig, status))
            sigs[(u.name, d)] = sig
    if payloads:
        writes += write_signatures(store, payloads, manifest_text=text)
    if failed and strict:
        raise AclarenaError(f"no signature for {'; '.join(failed)}; raise -n (prompts per probe set) or "
                            f"--max-new-tokens, or leave that update out with --updates")
    return SignaturesResult(run_dir=Path(os.fspath(run_dir)), settings=settings, rows=tuple(rows), signatures=sigs,
                            warnings=tuple(dict.fromkeys(warnings)), writes=tuple(dict.fromkeys(writes)),
                            failed=tuple(failed), notes=tuple(notes))



def _check_generations(store: ResultsStore, todo: list[Update], manifest: Manifest) -> None:
    """Before any model loads: a domain per update, and generations (or prompts to make them: the run's own
    suites of the domain, or an arena domain) per parent."""
    from aclarena.envs import DOMAINS
    from aclarena.results.probes import list_probe_sets

    have = set(list_probe_sets(store)) if store.exists() else set()
    for u in todo:
        if not u.domains:
            raise AclarenaError(f"update {u.name!r} has no domain: {u.child!r} has no `domain` in aclarena.toml, so "
                                "there is no domain to probe its parent on; set it")
        for d in u.domains:
            p = probe_name(u.parent, d)
            if p not in have and d not in DOMAINS and not any(s.domain == d for s in manifest.suites.values()):
                raise AclarenaError(
                    f"update {u.name!r}: its parent {u.parent!r} has no generations of domain {d!r} (no probe set "
                    f"{p!r} in results.h5, no suite of that domain in aclarena.toml, and {d!r} is not an arena domain "
                    "to sample prompts from); store them with "
                    f"`aclarena-diag probe --run DIR --ref {u.parent} --prompts FILE.jsonl --name {p}`")


def _score(run_dir: RunPath, store: ResultsStore, manifest: Manifest, todo: list[Update], *, n: int,
           max_new_tokens: int, high: HighEntropy, eps: float, batch_size: int, load: Any, show_progress: bool,
           warnings: list[str], writes: list[str], notes: list[str]) -> dict[tuple[str, str], str]:
    """Freeze each parent's generations of each domain (when missing) and score the children on them;
    returns the ``scores_id`` of every (probe, child)."""
    from aclarena.analysis.probe import make_probe
    from aclarena.analysis.tokens import tokens
    from aclarena.probes.generation import GenerationSettings
    from aclarena.results.probes import list_probe_sets, write_probe_set

    have = set(list_probe_sets(store)) if store.exists() else set()
    groups: dict[str, tuple[str, str, list[str]]] = {}
    for u in todo:
        for d in u.domains:
            groups.setdefault(probe_name(u.parent, d), (u.parent, d, []))[2].append(u.child)
    gen = GenerationSettings(max_new_tokens=max_new_tokens, batch_size=batch_size)
    scores_ids: dict[tuple[str, str], str] = {}
    for probe, (parent, domain, children) in groups.items():
        if probe not in have:
            made = make_probe(str(run_dir), manifest, parent, probe, domain=domain, n=n, settings=gen, load=load,
                              show_progress=show_progress)
            write_probe_set(store, made, manifest_text=manifest.to_toml())
            notes.append(f"probe set {probe}: {parent}'s generations on prompts from {made.settings['prompt_source']}")
            warnings += made.warnings
            writes.append(f"probes/{probe}")
        drift = tokens(run_dir, parent, probe=probe, against=list(dict.fromkeys(children)), high=str(high), eps=eps,
                       batch_size=batch_size, load=load, show_progress=show_progress, manifest=manifest)
        warnings += drift.warnings
        writes += drift.writes
        with store.reader() as r:
            for c in children:
                scores_ids[(probe, c)] = str(read_scores_meta(r, probe, c).scores_id)
    return scores_ids


def _stored(store: ResultsStore, key: str, want: dict[str, Any]) -> DriftSignature | None:
    """The stored signature at ``key`` when it was computed with ``want`` (settings and scores), else None."""
    if not store.has(key):
        return None
    with store.reader() as r:
        if settings_of(r, key) != want:
            return None
        return DriftSignature.from_dict(read_signature(r, key).signature())


def _payload(u: Update, domain: str, probe: str, sig: DriftSignature, made_with: dict[str, Any],
             seed: int) -> SignatureData:
    """The stored form of ``u``'s signature on ``domain`` (:mod:`aclarena.results.signatures`)."""
    return SignatureData(update=u.name, kind=u.kind, parent=u.parent, child=u.child, domain=domain, probe=probe,
                         seed=seed, values=sig.values, low=sig.low, high=sig.high, high_share=sig.high_share,
                         first_k_share=sig.first_k_share, n_sequences=sig.n_sequences, n_positions=sig.n_positions,
                         n_valid=sig.n_valid, n_high=sig.n_high, n_first_k=sig.n_first_k, settings=sig.settings,
                         made_with=made_with)


def _sign(store: ResultsStore, probe: str, child: str, high: HighEntropy, settings: Mapping[str, Any]) -> DriftSignature:
    a = _arrays(store, probe, child)
    lengths = np.diff(a["offsets"])
    return drift_signature(a["ref_entropy"], a["ref_logprob"], a["ref_top1"], a["kl"], a["logprob"], a["top1"],
                           np.repeat(np.arange(len(lengths)), lengths), reply_index(a["ref_position"], a["offsets"]),
                           valid=a["status"] == 0, high=high, eps=settings["eps"], first_k=settings["first_k"],
                           n_boot=settings["n_boot"], level=settings["level"], seed=settings["seed"])


def demo_block(data: Mapping[str, Any]) -> dict[str, Any]:
    """The demo summary's ``signatures`` entry from ``signatures --json`` output (or
    :meth:`SignaturesResult.to_dict`): per update its kind, domain and the four headline measures as
    ``[value, low, high]``, plus the chance shares they compare with."""
    keep = ("kl_share_high", "barely_moved_low", "kl_share_first_k", "concentration_area")
    out = []
    for r in data.get("updates", []):
        out.append({"update": r["update"], "kind": r["kind"], "domain": r["domain"], "n_sequences": r["n_sequences"],
                    "high_share": r["high_share"], "first_k_share": r["first_k_share"],
                    **{m: [r[m], r[f"{m}_low"], r[f"{m}_high"]] for m in keep}})
    return {"settings": dict(data.get("settings", {})), "updates": out, "failed": list(data.get("failed", []))}
