"""The dashboard's notes, computed from the run: each page's own numbers first, the reference study's
beside them as a labelled reference ("Study (Qwen3-8B): ...") (issue 46).

Pure functions over plain data (the stored summaries as dicts, the comparison's rows), so that a
page never prints a fixed claim its run may contradict: a number the run lacks is named as missing
with the command that would make it, and a method the run lacks is never mentioned.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

STUDY_MODEL = "Qwen3-8B"
#: The reference study's figures (ACLArena, arXiv 2609.23989; design.md), as the pages quote them.
STUDY_FIGURES = {
    "sft_rl": "SFT moves the weights 3-7x as far as RL",
    "stage_oracle": "stage updates are only partly aligned with their single-task oracle",
    "mix_cos": "oracle-mix SFT from the base vs from the sequential end point, cosine 0.77",
    "unrelated_cos": "unrelated SFT tasks, cosine 0.05",
    "kl_share_high": "forgetting concentrates at the ~6% high-entropy positions",
    "barely_moved_low": "~94% of low-entropy positions barely move",
    # consolidation: one claim per method family, quoted only when the run has that family
    "mmopd": "MMOPD is the most balanced shared-weight model",
    "sdft": "SDFT recovers search but loses IF",
    "merge-uniform": "uniform merging keeps general knowledge",
    "mle": "MLE stays near each oracle in-domain",
}


def study(*keys: str) -> str:
    """``Study (Qwen3-8B): a; b.`` for the figures named."""
    return f"Study ({STUDY_MODEL}): " + "; ".join(STUDY_FIGURES[k] for k in keys) + "."


def _finite(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


def _num(x: Any) -> float:
    """``x`` as a float, NaN when it is not a finite number."""
    return float(x) if _finite(x) else math.nan


# --- displacement ---------------------------------------------------------------------------------


def sft_rl_ratios(s: Mapping[str, Any]) -> list[tuple[str, float]]:
    """(stage, ‖Δθ_SFT‖ / ‖Δθ_RL‖) of every stage of the displacement summary that has both."""
    return [(str(r["stage"]), float(r["ratio"])) for r in s.get("ratios", []) if _finite(r.get("ratio"))]


def displacement_note(s: Mapping[str, Any]) -> str:
    """This run's SFT/RL displacement ratios beside the study's 3-7x."""
    ratios = sft_rl_ratios(s)
    phases = set(s.get("phases", []))
    if ratios:
        shown = ", ".join(f"{r:.1f}x ({stage})" for stage, r in ratios[:8])
        more = f" and {len(ratios) - 8} more stages" if len(ratios) > 8 else ""
        overall = s.get("overall_ratio")
        mean = f"; mean SFT / mean RL {overall:.1f}x" if _finite(overall) and len(ratios) > 1 else ""
        run = f"This run: SFT moves the weights {shown}{more} as far as RL{mean}."
    elif "sft" in phases and "rl" in phases:
        run = "This run: no stage has both an SFT and a non-zero RL update, so there is no SFT/RL ratio."
    else:
        have = ", ".join(sorted(p.upper() for p in phases if p)) or "no phase"
        run = (f"This run has no SFT and RL update of one stage to compare (its updates: {have}); a curriculum "
               "with `phases = [\"sft\", \"rl\"]` and `aclarena-diag displacement --run DIR` make one.")
    return f"{run} {study('sft_rl')}"


# --- task vectors ---------------------------------------------------------------------------------


def _vector_index(s: Mapping[str, Any]) -> dict[tuple[str, str], int]:
    return {(p, m): i for i, (p, m) in enumerate(zip(s["plus"], s["minus"], strict=True))}


def stage_oracle_cosines(s: Mapping[str, Any], checkpoints: Mapping[str, tuple[str | None, str | None, str]],
                         same: Mapping[str, str] | None = None) -> list[tuple[str, str, float]]:
    """(stage update, oracle, cosine) for each stage update (θ − θ_parent of a stage checkpoint) and the
    update of the oracle of its domain and phase (oracle − its parent; oracle − base without one). ``checkpoints``: name -> (domain, phase, kind).
    ``same``: oracle -> the stage checkpoint whose folder it is (the first stage's oracle is that stage, trained
    once): that pair's cosine is 1 by construction and is left out."""
    cos = s["cos"]
    index = _vector_index(s)
    base = s.get("base", "base")
    oracle_of: dict[tuple[str | None, str | None], str] = {}
    for o in s.get("oracles", []):
        dom, phase, _ = checkpoints.get(o, (None, None, "oracle"))
        oracle_of.setdefault((dom, phase), o)
    out = []
    for i, (plus, minus, kind) in enumerate(zip(s["plus"], s["minus"], s["kinds"], strict=True)):
        dom, phase, ck_kind = checkpoints.get(plus, (None, None, ""))
        if kind != "update" or ck_kind != "stage" or dom is None:
            continue
        oracle = oracle_of.get((dom, phase)) or oracle_of.get((dom, "rl")) or oracle_of.get((dom, None))
        if oracle is not None and (same or {}).get(oracle) == plus:
            continue
        # the oracle's own update of that phase (oracle − its parent), else its direction from the base
        j = next((k for k, (p, kd) in enumerate(zip(s["plus"], s["kinds"], strict=True))
                  if p == oracle and kd == "update"), index.get((oracle, base))) if oracle else None
        if j is None or not _finite(cos[i][j]):
            continue
        out.append((f"{plus} − {minus}", str(oracle), float(cos[i][j])))
    return out


def unrelated_sft_cosines(s: Mapping[str, Any], checkpoints: Mapping[str, tuple[str | None, str | None, str]]
                          ) -> list[tuple[str, str, float]]:
    """(oracle a, oracle b, cosine) of the SFT oracle directions of every two different domains."""
    cos = s["cos"]
    index = _vector_index(s)
    base = s.get("base", "base")
    sft = [(o, checkpoints[o][0]) for o in s.get("oracles", [])
           if o in checkpoints and checkpoints[o][1] == "sft" and (o, base) in index]
    out = []
    for a in range(len(sft)):
        for b in range(a + 1, len(sft)):
            if sft[a][1] != sft[b][1]:
                c = cos[index[(sft[a][0], base)]][index[(sft[b][0], base)]]
                if _finite(c):
                    out.append((sft[a][0], sft[b][0], float(c)))
    return out


def mix_cosine(s: Mapping[str, Any], end: str | None) -> float | None:
    """cos(sdft − base, sdft-from-end − end) when the run has both (the study's oracle-mix pair), else None."""
    index = _vector_index(s)
    base = s.get("base", "base")
    i, j = index.get(("sdft", base)), index.get(("sdft-from-end", end or ""))
    if i is None or j is None or not _finite(s["cos"][i][j]):
        return None
    return float(s["cos"][i][j])


def vectors_note(s: Mapping[str, Any], checkpoints: Mapping[str, tuple[str | None, str | None, str]],
                 end: str | None = None, same: Mapping[str, str] | None = None) -> str:
    """This run's stage-update-vs-oracle, unrelated-SFT (and oracle-mix) cosines beside the study's (``same``:
    see :func:`stage_oracle_cosines`)."""
    parts = []
    keys = ["stage_oracle"]
    so = stage_oracle_cosines(s, checkpoints, same)
    if so:
        parts.append("stage update vs its oracle " + ", ".join(f"{c:.2f} ({u} vs {o})" for u, o, c in so[:6])
                     + (f" and {len(so) - 6} more" if len(so) > 6 else ""))
    mix = mix_cosine(s, end)
    if mix is not None:
        parts.append(f"oracle-mix SFT from the base vs from the sequential end {mix:.2f}")
        keys.append("mix_cos")
    un = unrelated_sft_cosines(s, checkpoints)
    if un:
        mean = sum(c for _, _, c in un) / len(un)
        parts.append(f"unrelated SFT tasks {mean:.2f}" + (f" (mean of {len(un)} pairs)" if len(un) > 1
                                                         else f" ({un[0][0]} vs {un[0][1]})"))
        keys.append("unrelated_cos")
    if not parts:
        run = ("This run has no stage update with an oracle of its domain to compare: an `[oracles] domains = "
               "[...]` table in the curriculum, `aclarena-diag train`, then `aclarena-diag vectors --run DIR`.")
    else:
        run = "This run: cosine of " + "; ".join(parts) + "."
    return f"{run} {study(*keys)}"


# --- tokens ---------------------------------------------------------------------------------------


def tokens_note(probe: str, row: Mapping[str, Any] | None) -> str:
    """The probe set's KL share at high-entropy positions and the low-entropy positions that barely
    moved, for one checkpoint's stored summary (``row``), beside the study's."""
    if not row or not _finite(row.get("kl_share_high")):
        return f"No token summary for {probe}: run `aclarena-diag tokens --run DIR`. " + study(
            "kl_share_high", "barely_moved_low")
    n_high, n_valid = _num(row.get("n_high")), _num(row.get("n_valid"))
    frac = f"{100 * n_high / n_valid:.0f}% " if math.isfinite(n_high) and n_valid > 0 else ""
    share, low = _num(row["kl_share_high"]), _num(row.get("barely_moved_low"))
    run = (f"This run ({probe}, {row.get('checkpoint', '?')}): the {frac}highest-entropy positions carry "
           f"{100 * share:.0f}% of the KL")
    if math.isfinite(low):
        run += f"; {100 * low:.0f}% of low-entropy positions barely move"
    return f"{run}. {study('kl_share_high', 'barely_moved_low')}"


# --- consolidation --------------------------------------------------------------------------------


class _Cell(Protocol):
    mean: float
    std: float


class _Row(Protocol):
    label: str
    role: str
    method: str | None
    cells: Mapping[str, Any]


def _domain(suite: str) -> str:
    return suite.split("/")[0]


def _cell_text(c: Any) -> str:
    return f"{c.mean:.2f}" + (f" ± {c.std:.2f}" if _finite(c.std) else "")


def oracle_shares(rows: Sequence[Any], in_domain: Sequence[str]) -> dict[str, dict[str, float]]:
    """For each method row (role "method" or "mle"): its in-domain score / its domain's oracle score, per
    in-domain suite with a non-zero oracle (the oracle row of the suite's domain: its ``domain`` field)."""
    oracle = {r.domain: r for r in rows if r.role == "oracle"}
    out: dict[str, dict[str, float]] = {}
    for r in rows:
        if r.role not in ("method", "mle"):
            continue
        shares = {}
        for suite in in_domain:
            o = oracle.get(_domain(suite))
            c = r.cells.get(suite)
            if o is None or c is None or suite not in o.cells:
                continue
            om = o.cells[suite].mean
            if _finite(om) and om > 0 and _finite(c.mean):
                shares[suite] = c.mean / om
        out[r.label] = shares
    return out


def method_family(method: str | None) -> str | None:
    """The study's family of a consolidation method name: mmopd, sdft, merge-uniform, mle, or None."""
    if not method:
        return None
    m = method.lower()
    for fam in ("mmopd", "sdft", "mle"):
        if m == fam or m.startswith(fam + "-") or m.startswith(fam + "_"):
            return fam
    return "merge-uniform" if m.startswith("merge-uniform") or m == "uniform" else None


def consolidation_note(rows: Sequence[Any], in_domain: Sequence[str]) -> str:
    """The run's most balanced shared-weight model (highest worst in-domain share of its oracle), each
    method's shares, and the study's claims about the method families the run has (none otherwise)."""
    shares = oracle_shares(rows, in_domain)
    by_label = {r.label: r for r in rows}
    oracles = {r.domain: r for r in rows if r.role == "oracle"}
    measurable = [s for s in in_domain if (o := oracles.get(_domain(s))) is not None and s in o.cells
                  and _finite(o.cells[s].mean) and o.cells[s].mean > 0]
    shared = {k: v for k, v in shares.items() if by_label[k].role == "method" and v and set(v) == set(measurable)}
    parts = []
    if shared:
        best = max(shared, key=lambda k: (min(shared[k].values()), sum(shared[k].values())))
        cells = ", ".join(f"{_domain(s)} {_cell_text(by_label[best].cells[s])} ({100 * x:.0f}% of the oracle)"
                          for s, x in shared[best].items())
        parts.append(f"the most balanced shared-weight model (highest worst in-domain share of its oracle) is "
                     f"{best}: {cells}")
        others = [f"{k} {min(v.values()) * 100:.0f}%" for k, v in shared.items() if k != best]
        if others:
            parts.append("worst in-domain share of the others: " + ", ".join(others))
        missing = [s for s in in_domain if s not in measurable]
        if missing:
            parts.append(f"no oracle score above 0 to compare on {', '.join(missing)} (`aclarena-diag train` with "
                         "its oracle, then `aclarena-diag eval`)")
    elif shares:
        parts.append("no shared-weight model has a score on every in-domain suite with a non-zero oracle")
    else:
        parts.append("no consolidated model to compare")
    end = next((r for r in rows if r.role == "end"), None)
    for r in rows:
        if method_family(r.method) == "merge-uniform" and end is not None and "general" in r.cells \
                and "general" in end.cells and _finite(r.cells["general"].mean) and _finite(end.cells["general"].mean):
            parts.append(f"{r.label} general {_cell_text(r.cells['general'])} vs the sequential end's "
                         f"{_cell_text(end.cells['general'])}")
            break
    run = "This run: " + "; ".join(parts) + "."
    families = list(dict.fromkeys(f for f in (method_family(r.method) for r in rows if r.role in ("method", "mle"))
                                  if f is not None))
    if any(r.role == "mle" for r in rows) and "mle" not in families:
        families.append("mle")
    return run + (" " + study(*families) if families else "")


# --- empty, flat and not-applicable states ----------------------------------------------------------


def avg_k_state(greedy: Sequence[float], sampled: Sequence[float]) -> tuple[int, int, str | None]:
    """(cells with an avg@k score, cells with a greedy score, the one-line reason avg@k is offered only in
    part or not at all; None when every greedy cell has one)."""
    n_greedy = sum(_finite(x) for x in greedy)
    n_avg = sum(_finite(x) for x in sampled)
    if n_avg == 0:
        return 0, n_greedy, ("avg@k: no cell of this run has sampled scores (eval ran greedy only); "
                             "`aclarena-diag eval --run DIR --samples 4` adds it.")
    if n_avg < n_greedy:
        return n_avg, n_greedy, (f"avg@k: only {n_avg} of {n_greedy} cells were sampled (the others show -); "
                                 "`aclarena-diag eval --run DIR --samples 4` fills the rest.")
    return n_avg, n_greedy, None


def floor_note(values: Sequence[float], what: str = "greedy") -> str | None:
    """One line when every score shown is 0 (every model at the floor: no skill was learned yet), else None."""
    xs = [x for x in values if _finite(x)]
    if not xs or any(x != 0 for x in xs):
        return None
    return (f"Every model scores 0.00 on every suite ({what}): all are at the floor, so no skill was learned "
            "yet and nothing can be forgotten; train longer (more `max_steps` in the curriculum's stages, then "
            "`aclarena-diag train --run DIR` and `aclarena-diag eval --run DIR`).")


#: why a repair-score part has no suite (the partition of docs/consolidation.md)
REPAIR_PART_EMPTY = {
    "healing": "the stage damaged no suite measurably",
    "preservation": "the stage improved no held-out suite",
    "non_damage": "the stage left no suite unchanged",
    "target_retention": "the stage gained nothing measurable on its own target suite",
}


def repair_part_reason(name: str, value: float, suites: Sequence[str], dropped: int) -> str | None:
    """Why a repair score's part is "-" (None when it has a value)."""
    if _finite(value):
        return None
    label = name.replace("_", "-")
    if not suites:
        return f"{label}: - because {REPAIR_PART_EMPTY.get(name, 'no suite is of its kind')}"
    return (f"{label}: - on {', '.join(suites)}: its denominator is not positive there (e.g. the stage's end "
            f"scores 0), so the share is undefined ({dropped} resamples dropped)")


# --- probe sets -----------------------------------------------------------------------------------


def signatures_probe(probe: str, checkpoints: Sequence[str]) -> tuple[str, str] | None:
    """(parent, domain) when ``probe`` is named like the probe sets `aclarena-diag signatures` makes
    (``<parent checkpoint>.<domain>``), else None."""
    parent, dot, domain = probe.rpartition(".")
    return (parent, domain) if dot and parent in checkpoints and domain else None


def main_probe(probes: Sequence[str], checkpoints: Sequence[str]) -> str | None:
    """The run's main reference probe set: the first (in manifest order) named exactly like a checkpoint
    (`aclarena-diag tokens --ref NAME`), else the first not made by `signatures`, else the first."""
    if not probes:
        return None
    exact = [c for c in checkpoints if c in probes]
    if exact:
        return exact[0]
    own = [p for p in probes if signatures_probe(p, checkpoints) is None]
    return (own or list(probes))[0]


def probe_help(probe: str, reference: str | None, checkpoints: Sequence[str]) -> str:
    """One line on what a probe set is, from its name and reference."""
    sig = signatures_probe(probe, checkpoints)
    if sig is not None:
        return (f"{probe}: made by `aclarena-diag signatures`: {sig[0]}'s own generations on {sig[1]} prompts, "
                f"the reference for the updates that start from {sig[0]}")
    ref = reference or probe
    return (f"{probe}: {ref}'s frozen generations on its probe prompts (`aclarena-diag tokens --ref {ref}`); "
            "every later checkpoint is scored against them")
