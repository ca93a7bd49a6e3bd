"""``aclarena-diag tokens``: teacher-forced entropy and drift of later checkpoints on a frozen probe set."""

from __future__ import annotations

import argparse
import json
from typing import Any

from aclarena.cli._common import add_verb, manifest_of, print_json, print_table, progress
from aclarena.cli.probe import add_load_options, make_probe, print_warnings, quiet_libraries
from aclarena.errors import AclarenaError

SCORES_TYPE = "token-scores"
SUMMARY_TYPE = "token-summary"
REFERENCE_TYPE = "token-reference"
RESULT_VERSION = "0.1.0"


def register(sub: argparse._SubParsersAction) -> None:
    p = add_verb(
        sub,
        "tokens",
        help="teacher-forced entropy and drift (KL, JS, flips) of later checkpoints on a reference's probe set",
        description="Every checkpoint scores the reference's frozen generations teacher-forced; per position: "
        "entropy, log-prob of the reference token, top-k, exact KL(p_ref || p_ckpt) and JS. Per checkpoint: how "
        "drift splits between high- and low-entropy positions. Finished checkpoints are skipped on a rerun.",
        examples=(
            "aclarena-diag tokens --ref seq-math --run runs/demo",
            "aclarena-diag tokens --ref seq-math --run runs/mine --against seq-search,seq-ecom --high nats=1.5",
            "aclarena-diag tokens --ref seq-math --run runs/mine --probe math-traces --json",
        ),
    )
    p.add_argument("--ref", required=True, metavar="NAME", help="the reference checkpoint (a manifest name)")
    p.add_argument("--probe", metavar="P", help="probe set to score (default: the one named like --ref; made with "
                   "defaults from the reference's domain when missing)")
    p.add_argument("--against", default="later", metavar="WHICH",
                   help="later (default: every descendant of --ref and every consolidated checkpoint), all, or a "
                        "comma-separated list of names")
    p.add_argument("--high", default="q=0.06", metavar="SPEC",
                   help="high-entropy set: q=FRACTION of positions (default q=0.06) or nats=THRESHOLD")
    p.add_argument("--eps", type=float, default=0.05, help="|Δ log-prob| below which a position barely moves (0.05)")
    p.add_argument("--batch-size", type=int, default=8, metavar="B", help="sequences per forward pass (default 8)")
    p.add_argument("--chunk-size", type=int, default=None, metavar="C",
                   help="positions per output-head chunk (default: both models' logits in 640 MiB)")
    p.add_argument("--topk", type=int, default=5, metavar="K", help="alternatives kept per position (default 5)")
    p.add_argument("--force", action="store_true", help="rescore checkpoints even when finished results exist")
    add_load_options(p)
    p.set_defaults(func=run)


# --- helpers ----------------------------------------------------------------------------------


def weights_fingerprint(info: Any, manifest: Any, run_dir: str) -> str:
    """The checkpoint's fingerprint, including its base's when it is an adapter."""
    from aclarena.models.checkpoint import inspect
    from aclarena.models.tensors import checkpoint_fingerprint

    on = None
    if info.source == "adapter" and info.spec.on:
        on = inspect(manifest.resolve(info.spec.on), manifest, run_dir, allow_pickle=True)
    return checkpoint_fingerprint(info, on=on)


def targets_of(manifest: Any, ref: str, against: str) -> list[str]:
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


def _attr_settings(attrs: dict[str, Any]) -> dict[str, Any] | None:
    raw = attrs.get("settings")
    if raw is None:
        return None
    try:
        return json.loads(raw) if isinstance(raw, str) else dict(raw)
    except (TypeError, ValueError):
        return None


def summarize_stored(reader: Any, probe: str, ckpt: str, high: Any, eps: float) -> Any:
    """The summary of a stored checkpoint's scores (flat arrays read from the store)."""
    import numpy as np

    from aclarena.diagnostics.token_drift import summarize_drift
    from aclarena.store.token_keys import reference_key, scores_key

    ref, sc = reference_key(probe), scores_key(probe, ckpt)

    def flat(key: str) -> np.ndarray:
        return reader.ragged(key).all()

    status = flat(f"{sc}/status")
    return summarize_drift(
        flat(f"{ref}/entropy"), flat(f"{ref}/logprob"), flat(f"{ref}/top1"),
        flat(f"{sc}/kl"), flat(f"{sc}/js"), flat(f"{sc}/logprob"), flat(f"{sc}/top1"),
        high=high, eps=eps, valid=status == 0,
    )


def _row(name: str, summary: Any, status: str, scores_attrs: dict[str, Any] | None = None) -> dict[str, Any]:
    d = summary.to_dict()
    d.pop("curve_x", None)
    d.pop("curve_y", None)
    out = {"checkpoint": name, "status": status} | d
    if scores_attrs:
        out["n_nonfinite"] = int(scores_attrs.get("n_nonfinite", 0))
        out["n_beyond_context"] = int(scores_attrs.get("n_beyond_context", 0))
    return out


# --- the verb ---------------------------------------------------------------------------------


def run(args: argparse.Namespace) -> int:
    from aclarena.distributed import world

    with world(args.device) as w:
        return _run(args, w)


def _run(args: argparse.Namespace, w: Any) -> int:
    from aclarena.diagnostics.token_drift import DriftSummary, HighEntropy
    from aclarena.models.checkpoint import inspect, require_same_tokenizer
    from aclarena.probes.probe_set import list_probe_sets, read_probe_set, write_probe_set
    from aclarena.store import Json, ResultsStore
    from aclarena.store.token_keys import reference_key, scores_key, summary_key

    quiet_libraries()
    manifest = manifest_of(args)
    ref = manifest.resolve(args.ref).name
    try:
        high = HighEntropy.parse(args.high)
    except ValueError as e:
        raise AclarenaError(f"--high: {e}") from None
    if not (args.eps > 0):
        raise AclarenaError(f"--eps must be > 0, got {args.eps}")
    for opt, value in (("--batch-size", args.batch_size), ("--topk", args.topk), ("--chunk-size", args.chunk_size)):
        if value is not None and value < 1:
            raise AclarenaError(f"{opt} must be at least 1, got {value}")
    targets = targets_of(manifest, ref, args.against)
    infos = {n: inspect(manifest.resolve(n), manifest, args.run, allow_pickle=args.allow_pickle)
             for n in dict.fromkeys([ref, *targets])}
    for info in infos.values():
        info.require_loadable()
    require_same_tokenizer(list(infos.values()))
    store = ResultsStore(args.run)
    # rank 0 alone reads and writes the store; the other ranks get what they need from it
    probes = w.run_main(lambda: list_probe_sets(store))
    probe_name = args.probe or ref
    manifest_text = manifest.to_toml()
    warnings: list[str] = []
    if probe_name not in probes:
        if args.probe:
            from aclarena.errors import unknown_name

            raise unknown_name("probe set", args.probe, probes, hint=f"make one with `aclarena-diag probe --ref {ref}`")
        domain = manifest.resolve(ref).domain
        if not domain:
            raise AclarenaError(
                f"checkpoint {ref!r} has no probe set and no domain in the manifest to make one from; run "
                f"`aclarena-diag probe --ref {ref} --prompts FILE.jsonl` (or --from-traces) first"
            )
        from aclarena.cli.probe import load_options

        probe = make_probe(args.run, manifest, ref, probe_name, domain=domain,
                           show_progress=not args.json and w.is_main, load=load_options(args), world=w)
        w.run_main(lambda: write_probe_set(store, probe, manifest_text=manifest_text))  # rank 0 writes, all wait
        if w.is_main:
            warnings += probe.warnings

    def read_probe() -> Any:
        probe = read_probe_set(store, probe_name, with_text=False)
        if probe.reference != ref:
            raise AclarenaError(f"probe set {probe_name!r} holds generations of {probe.reference!r}, not {ref!r}; "
                                f"pass --ref {probe.reference} or another --probe")
        return probe

    probe = w.run_main(read_probe)
    base_settings = {"probe": probe_name, "probe_digest": probe.digest, "reference": ref,
                     "reference_weights": weights_fingerprint(infos[ref], manifest, args.run),
                     "topk": args.topk, "dtype": args.dtype, "scoring_version": "1"}

    def ckpt_settings(name: str) -> dict[str, Any]:
        return base_settings | {"checkpoint": name, "weights": weights_fingerprint(infos[name], manifest, args.run)}

    def plan() -> tuple[list[str], bool]:
        todo = []
        with_store = store.exists()
        for name in targets:
            key = scores_key(probe_name, name)
            if args.force or not (with_store and store.has(key)
                                  and _attr_settings(store.attrs(key)) == ckpt_settings(name)):
                todo.append(name)
        ref_ok = with_store and store.has(reference_key(probe_name)) and \
            _attr_settings(store.attrs(reference_key(probe_name))) == base_settings
        return todo, bool(ref_ok)

    todo, ref_ok = w.run_main(plan)
    statuses: dict[str, str] = {n: "cached" for n in targets if n not in todo}
    if todo or not ref_ok:
        _score(args, manifest, store, probe, ref, todo, base_settings, ckpt_settings, high, statuses,
               warnings, manifest_text, write_reference=not ref_ok, world=w)
    if not w.is_main:
        return 0
    # summaries: recompute where the settings (--high, --eps) or the scores changed
    rows = []
    writes = []
    with store.reader() as r:
        for name in targets:
            skey, mkey = scores_key(probe_name, name), summary_key(probe_name, name)
            sattrs = r.attrs(skey)
            want = {"high": str(high), "eps": args.eps, "scores_id": sattrs.get("scores_id")}
            if r.has(mkey) and _attr_settings(r.attrs(mkey)) == want:
                summary = DriftSummary.from_dict(r.read(f"{mkey}/summary"))
            else:
                summary = summarize_stored(r, probe_name, name, high, args.eps)
                writes.append((mkey, {"summary": Json(summary.to_dict())}, SUMMARY_TYPE, RESULT_VERSION,
                               {"settings": want, "checkpoint": name, "reference": ref}))
            status = statuses.get(name, "cached")
            nonfinite = int(sattrs.get("n_nonfinite", 0))
            if nonfinite:
                status = f"flagged: {nonfinite} NaN/inf positions"
            rows.append(_row(name, summary, status, sattrs))
    if writes:
        store.write_many(writes, overwrite=True, manifest_text=manifest_text)
    _print(args, rows, probe, ref, high, warnings)
    flagged = [r for r in rows if r["n_nonfinite"]]
    if flagged:
        names = ", ".join(f"{r['checkpoint']!r} ({r['n_nonfinite']} positions)" for r in flagged)
        raise AclarenaError(f"NaN or infinite logits in {names}; those positions are flagged in the store and kept "
                            "out of the summaries")
    return 0


def _gather_rows(w: Any, plan: Any, mine: list[int], obj: Any, fields: tuple[str, ...]) -> None:
    """Rank 0: fill ``obj``'s flat arrays with the other ranks' positions (their batches)."""
    if not w.distributed:
        return
    from aclarena.distributed import merge_rows

    index = plan.positions_of(mine)
    parts = w.gather((index, {k: getattr(obj, k)[index] for k in fields}))
    if parts is not None:
        merge_rows(parts[1:], {k: getattr(obj, k) for k in fields})


REF_FIELDS = ("entropy", "logprob", "top1", "topk_ids", "topk_logprobs", "status")
SCORE_FIELDS = ("entropy", "logprob", "top1", "topk_ids", "topk_logprobs", "kl", "js", "status")


def _score(args: argparse.Namespace, manifest: Any, store: Any, probe: Any, ref: str, todo: list[str],
           base_settings: dict[str, Any], ckpt_settings: Any, high: Any, statuses: dict[str, str],
           warnings: list[str], manifest_text: str, *, write_reference: bool, world: Any) -> None:
    """Score ``todo`` against ``ref``; with several ranks each computes its round-robin share of the
    batches (the same batches as one process) and rank 0 gathers and writes."""
    import functools
    import gc
    import uuid
    from dataclasses import replace

    from aclarena.cli.probe import load_options
    from aclarena.diagnostics.token_drift import summarize_drift
    from aclarena.models.loading import load_model
    from aclarena.probes.teacher_forcing import STATUS_BEYOND_CONTEXT, BatchPlan, reference_outputs, score
    from aclarena.store import Json
    from aclarena.store.token_keys import reference_key, scores_key, summary_key

    w = world
    probe_name = probe.name
    opts = load_options(args, merge_adapter=True)
    opts = replace(opts, device=w.device(opts.device))
    batches = BatchPlan.make(probe, args.batch_size).batches
    mine = w.mine(len(batches))
    share = sum(len(batches[b]) for b in mine)
    with progress(not args.json and w.is_main) as bar:
        task = bar.add_task(f"reference {ref}", total=share)

        def reference_pass() -> Any:
            ref_model = load_model(ref, manifest, args.run, opts)
            out = reference_outputs(ref_model, probe, name=ref, batch_size=args.batch_size,
                                    chunk_size=args.chunk_size, topk=args.topk,
                                    progress=lambda k: bar.advance(task, k), batches=mine)
            del ref_model
            gc.collect()
            return out

        cache = w.each(reference_pass)
        _gather_rows(w, cache.plan, mine, cache.stats, REF_FIELDS)
        offsets = cache.plan.offsets
        # the reference's outputs go with the first checkpoint's scores: a checkpoint that cannot be
        # scored (NaN weights, say) then leaves the store as it was
        ref_items: list[Any] = []
        if write_reference and w.is_main:
            ref_items = [(reference_key(probe_name), cache.stats.to_store(offsets), REFERENCE_TYPE, RESULT_VERSION,
                          {"settings": base_settings, "reference": ref, "n_positions": int(offsets[-1]),
                           "n_invalid": int((cache.stats.status != 0).sum())})]
        for name in todo:
            bar.update(task, description=f"scoring {name}", completed=0, total=share)

            def score_one(name: str = name) -> Any:
                model = load_model(name, manifest, args.run, opts)
                out = score(model, cache, probe, name=name, progress=lambda k: bar.advance(task, k), batches=mine)
                del model
                gc.collect()
                return out

            res = w.each(score_one)
            _gather_rows(w, cache.plan, mine, res, SCORE_FIELDS)
            if not w.is_main:
                w.run_main(lambda: None)  # wait for rank 0's write (and fail with it)
                continue
            summary = summarize_drift(cache.stats.entropy, cache.stats.logprob, cache.stats.top1, res.kl, res.js,
                                      res.logprob, res.top1, high=high, eps=args.eps, valid=res.status == 0)
            beyond = int((res.status == STATUS_BEYOND_CONTEXT).sum())
            if beyond:
                warnings.append(f"{name}: {beyond} scored positions lie beyond its maximum positions "
                                f"({res.info.get('positions_limit')}); they are left out of its summary")
            scores_id = uuid.uuid4().hex[:16]
            sattrs = {"settings": ckpt_settings(name), "checkpoint": name, "reference": ref, "scores_id": scores_id,
                      "n_nonfinite": res.n_nonfinite, "n_beyond_context": beyond,
                      "batch_size": cache.batch_size, "chunk_size": cache.chunk_size}
            mattrs = {"settings": {"high": str(high), "eps": args.eps, "scores_id": scores_id},
                      "checkpoint": name, "reference": ref}
            # one atomic write per checkpoint: a kill leaves it either fully scored or not at all
            items = [
                *ref_items,
                (scores_key(probe_name, name), res.to_store(), SCORES_TYPE, RESULT_VERSION, sattrs),
                (summary_key(probe_name, name), {"summary": Json(summary.to_dict())}, SUMMARY_TYPE, RESULT_VERSION,
                 mattrs),
            ]
            ref_items = []
            w.run_main(functools.partial(store.write_many, items, overwrite=True, manifest_text=manifest_text))
            statuses[name] = "scored"
        if write_reference and not todo:
            w.run_main(functools.partial(store.write_many, ref_items, overwrite=True, manifest_text=manifest_text))


def _print(args: argparse.Namespace, rows: list[dict[str, Any]], probe: Any, ref: str, high: Any,
           warnings: list[str]) -> None:
    if args.json:
        print_json({"reference": ref, "probe": probe.name, "high": str(high), "eps": args.eps,
                    "positions": probe.n_scored, "sequences": probe.n_sequences, "checkpoints": rows,
                    "warnings": warnings})
        print_warnings(warnings, "tokens")
        return
    cols = ["checkpoint", "n_valid", "kl_mean", "kl_mean_high", "kl_mean_low", "kl_share_high", "flip_rate_high",
            "flip_rate_low", "barely_moved_low", "concentration_area", "status"]
    heads = ["checkpoint", "positions", "KL mean", "KL high", "KL low", "KL share high", "flips high", "flips low",
             "barely moved (low)", "conc. area", "status"]
    print_table(rows, cols, headers=heads,
                title=f"token drift against {ref} on probe {probe.name!r} ({probe.n_sequences} sequences, "
                      f"{probe.n_scored} scored positions; high = {high})",
                caption="KL in nats; high/low: reference entropy strata; barely moved: |Δ log-prob| < "
                        f"{args.eps:g}; conc. area 0.5 = drift unrelated to entropy, 1 = all at the top")
    print_warnings(warnings, "tokens")
