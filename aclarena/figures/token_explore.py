"""Drill-down data for the Tokens page: where drift sits, what replaced what, one token in full.

Everything here reads what ``aclarena-diag tokens`` stored (through :mod:`aclarena.results.tokens`)
and returns plain rows or HTML, so that the page, the tests and a notebook share it:

* :func:`rank_sequences` and :func:`rank_positions`: the most-drifted sequences and
  positions of one checkpoint (KL, flips, share of KL at high-entropy positions);
* :func:`substitutions`: at flipped positions, the reference's top token and the
  checkpoint's top token, counted over the probe set (a format takeover shows as a few
  pairs with large counts);
* :func:`token_detail`: one position in full (both top-k lists, log-probs, KL, JS,
  entropy, its KL rank in the sequence);
* :func:`colour_scale` and :func:`text_html`: the coloured text, with one colour scale per
  probe set (every sequence and checkpoint comparable), visible token boundaries and
  whitespace, readable byte pieces and a flip marker.

Whole-probe arrays are read once per file version and cached (a 256 × 1,024 probe set is
about 1 MB per array); one sequence's rows are read on demand.
"""

from __future__ import annotations

import functools
import html
import math
import os
from typing import TYPE_CHECKING, Any

import numpy as np

from aclarena.results.probes import probe_key
from aclarena.results.tokens import read_summary, reference_columns, row_offsets, scores_columns

if TYPE_CHECKING:
    from aclarena.figures.tokens import TokenView
    from aclarena.store.results import StoreReader

KL_LOW = 1e-4  # the drift colour scale starts here (log scale): smaller KL reads as unchanged
DRIFT_RGB = (214, 39, 40)
ENTROPY_RGB = (31, 119, 180)
BYTE_PIECE = "\ufffd"  # what a token that is only part of a UTF-8 character decodes to alone
STATUS_TEXT = {1: "non-finite logits (flagged, left out of summaries)", 2: "beyond this checkpoint's positions"}


# --- whole-probe arrays, cached per file version -------------------------------------------------


def _version(reader: StoreReader) -> tuple[str, int]:
    path = str(reader.path)
    return path, os.stat(path).st_mtime_ns


@functools.lru_cache(maxsize=4)
def _reference_cached(path: str, mtime_ns: int, probe: str) -> dict[str, np.ndarray]:
    from aclarena.store.results import ResultsStore

    with ResultsStore(os.path.dirname(path)).reader() as r:
        cols = reference_columns(r, probe, ("entropy", "position", "token", "top1"))
        return {"offsets": np.asarray(row_offsets(r, probe), np.int64), "entropy": cols["entropy"].astype(np.float64),
                "position": cols["position"].astype(np.int64), "token": cols["token"].astype(np.int64),
                "top1": cols["top1"].astype(np.int64)}


@functools.lru_cache(maxsize=6)
def _scores_cached(path: str, mtime_ns: int, probe: str, checkpoint: str) -> dict[str, Any]:
    from aclarena.store.results import ResultsStore

    with ResultsStore(os.path.dirname(path)).reader() as r:
        out: dict[str, Any] = scores_columns(r, probe, checkpoint, ("kl", "js", "top1", "status"))
        summary = read_summary(r, probe, checkpoint).summary
    out["kl"] = out["kl"].astype(np.float64)
    out["js"] = out["js"].astype(np.float64)
    out["top1"] = out["top1"].astype(np.int64)
    out["threshold"] = summary.get("entropy_threshold")
    return out


def reference_arrays(reader: StoreReader, probe: str) -> dict[str, np.ndarray]:
    """The reference's flat per-position arrays and their offsets (cached per file version)."""
    return _reference_cached(*_version(reader), probe)


def checkpoint_arrays(reader: StoreReader, probe: str, checkpoint: str) -> dict[str, Any]:
    """One checkpoint's flat kl, js, top1, status and the summary's entropy threshold (cached)."""
    return _scores_cached(*_version(reader), probe, checkpoint)


def _drift(reader: StoreReader, probe: str, checkpoint: str) -> dict[str, np.ndarray]:
    """Per position: valid, flipped, high-entropy, KL (0 where invalid) and the sequence index."""
    ref = reference_arrays(reader, probe)
    ck = checkpoint_arrays(reader, probe, checkpoint)
    h, kl = ref["entropy"], ck["kl"]
    valid = np.isfinite(h) & np.isfinite(kl) & np.isfinite(ck["js"]) & (ck["status"] == 0)
    thr = ck["threshold"]
    high = valid & (h >= thr) if thr is not None else np.zeros(len(h), bool)
    seq = np.repeat(np.arange(len(ref["offsets"]) - 1), np.diff(ref["offsets"]))
    return {"valid": valid, "flip": valid & (ck["top1"] != ref["top1"]), "high": high,
            "kl": np.where(valid, kl, 0.0), "seq": seq}


# --- vocabulary text, readable --------------------------------------------------------------------


def token_label(voc: tuple[str, ...], token_id: int) -> str:
    """A token's text as a table shows it: whitespace made visible, byte pieces named by id."""
    if not 0 <= token_id < len(voc):
        return f"<id {token_id}>"
    text = voc[token_id]
    if text == "" or BYTE_PIECE in text:
        return f"⟨byte piece, id {token_id}⟩"
    return visible(text)


# how whitespace is drawn, in plain text (visible) and in HTML (_shown, which keeps the line break/tab)
WHITESPACE_MARKS = {" ": ("·", ""), "\n": ("↵", "\n"), "\t": ("→", "\t")}


def visible(text: str) -> str:
    """Whitespace made visible: space ·, newline ↵, tab →; other control characters as their code point, e.g. ⟨U+001B⟩."""
    out = []
    for ch in text:
        if ch in WHITESPACE_MARKS:
            out.append(WHITESPACE_MARKS[ch][0])
        elif ord(ch) < 32 or 0x7F <= ord(ch) < 0xA0:
            out.append(f"⟨U+{ord(ch):04X}⟩")
        else:
            out.append(ch)
    return "".join(out)


# --- rankings -------------------------------------------------------------------------------------


def rank_sequences(reader: StoreReader, probe: str, checkpoint: str, labels: list[str] | None = None
                   ) -> list[dict[str, Any]]:
    """One row per sequence with scored positions: KL sum, mean and max, flips, the share of its KL
    at high-entropy positions, and ``pos``, the token index of its largest KL (where a click jumps)."""
    d = _drift(reader, probe, checkpoint)
    ref = reference_arrays(reader, probe)
    n = len(ref["offsets"]) - 1
    seq, kl, valid = d["seq"], d["kl"], d["valid"]
    n_valid = np.bincount(seq, weights=valid, minlength=n)
    kl_sum = np.bincount(seq, weights=kl, minlength=n)
    kl_high = np.bincount(seq, weights=np.where(d["high"], kl, 0.0), minlength=n)
    flips = np.bincount(seq, weights=d["flip"], minlength=n)
    # the largest KL of each sequence: sort by (sequence, KL) and take each group's last
    order = np.lexsort((np.where(valid, kl, -1.0), seq))
    ends = ref["offsets"][1:] - 1
    rows: list[dict[str, Any]] = []
    for i in range(n):
        if n_valid[i] == 0:
            continue
        top = order[ends[i]]
        rows.append({
            "id": f"{i}", "seq": i, "pos": int(ref["position"][top]),
            "sequence": labels[i] if labels else f"#{i}",
            "positions": int(n_valid[i]), "kl_sum": float(kl_sum[i]), "kl_mean": float(kl_sum[i] / n_valid[i]),
            "kl_max": float(kl[top]), "flips": int(flips[i]), "flip_rate": float(flips[i] / n_valid[i]),
            "high_share": float(kl_high[i] / kl_sum[i]) if kl_sum[i] > 0 else None,
        })
    rows.sort(key=lambda r: -r["kl_sum"])
    return rows


def rank_positions(reader: StoreReader, probe: str, checkpoint: str, n: int = 200) -> list[dict[str, Any]]:
    """The ``n`` positions with the largest KL: where they are, the token, entropy, KL, JS, flip."""
    from aclarena.figures.tokens import vocab

    d = _drift(reader, probe, checkpoint)
    ref = reference_arrays(reader, probe)
    ck = checkpoint_arrays(reader, probe, checkpoint)
    voc = vocab(reader, probe)
    ok = np.flatnonzero(d["valid"])
    if len(ok) > n:
        ok = ok[np.argpartition(-d["kl"][ok], n - 1)[:n]]
    ok = ok[np.argsort(-d["kl"][ok], kind="stable")]
    return [{
        "id": f"{int(d['seq'][j])}:{int(ref['position'][j])}", "seq": int(d["seq"][j]),
        "pos": int(ref["position"][j]), "token": token_label(voc, int(ref["token"][j])),
        "entropy": float(ref["entropy"][j]), "kl": float(d["kl"][j]), "js": float(ck["js"][j]),
        "high": bool(d["high"][j]), "flipped": bool(d["flip"][j]),
        "ref_top": token_label(voc, int(ref["top1"][j])), "ckpt_top": token_label(voc, int(ck["top1"][j])),
    } for j in ok]


def substitutions(reader: StoreReader, probe: str, checkpoint: str, n: int = 30) -> list[dict[str, Any]]:
    """At flipped positions: reference's top token -> checkpoint's top token, most frequent first.

    ``share``: the pair's part of all flips; ``seq``/``pos``: its instance with the largest KL.
    """
    from aclarena.figures.tokens import vocab

    d = _drift(reader, probe, checkpoint)
    ref = reference_arrays(reader, probe)
    ck = checkpoint_arrays(reader, probe, checkpoint)
    idx = np.flatnonzero(d["flip"])
    if len(idx) == 0:
        return []
    voc = vocab(reader, probe)
    a, b = ref["top1"][idx], ck["top1"][idx]
    width = int(max(a.max(), b.max())) + 1
    pair = a * width + b
    uniq, inverse, counts = np.unique(pair, return_inverse=True, return_counts=True)
    kl = d["kl"][idx]
    kl_sum = np.bincount(inverse, weights=kl)
    # the largest-KL instance of each pair
    order = np.lexsort((kl, inverse))
    last = np.cumsum(counts) - 1
    rows = []
    for k in np.argsort(-counts, kind="stable")[:n]:
        j = idx[order[last[k]]]
        rows.append({
            "id": f"{int(uniq[k])}", "from": token_label(voc, int(uniq[k] // width)),
            "to": token_label(voc, int(uniq[k] % width)), "count": int(counts[k]),
            "share": float(counts[k] / len(idx)), "kl_mean": float(kl_sum[k] / counts[k]),
            "seq": int(d["seq"][j]), "pos": int(ref["position"][j]),
        })
    return rows


# --- one token ------------------------------------------------------------------------------------


def token_detail(tokens: list[TokenView], pos: int, ids: list[int] | None = None) -> dict[str, Any] | None:
    """Token ``pos`` of a sequence (as :func:`aclarena.figures.tokens.sequence_tokens` returns it) in full,
    with its KL rank among the sequence's valid scored positions (1 = largest)."""
    if not 0 <= pos < len(tokens):
        return None
    t = tokens[pos]
    out: dict[str, Any] = {"pos": pos, "text": visible(t.text) if t.text else "⟨byte piece⟩", "scored": t.scored}
    if ids is not None:
        out["id"] = int(ids[pos])
    if not t.scored:
        return out
    out.update(entropy=t.entropy, ref_logprob=t.ref_logprob, logprob=t.logprob, kl=t.kl, js=t.js,
               flipped=t.flipped, status=t.status, n_scored=sum(1 for x in tokens if x.scored),
               ref_top=[(token_text_label(w), lp) for w, lp in t.ref_alternatives],
               ckpt_top=[(token_text_label(w), lp) for w, lp in t.alternatives])
    if math.isfinite(t.kl):
        kls = [x.kl for x in tokens if x.scored and math.isfinite(x.kl) and not x.status]
        out["rank"] = 1 + sum(1 for k in kls if k > t.kl)
        out["n_ranked"] = len(kls)
    return out


def token_text_label(text: str) -> str:
    return "⟨byte piece⟩" if text == "" or BYTE_PIECE in text else visible(text)


# --- colour and text ------------------------------------------------------------------------------


@functools.lru_cache(maxsize=8)
def _scale_cached(path: str, mtime_ns: int, probe: str, color_by: str, checkpoints: tuple[str, ...]) -> float:
    from aclarena.store.results import ResultsStore

    with ResultsStore(os.path.dirname(path)).reader() as r:
        if color_by == "entropy":
            h = reference_arrays(r, probe)["entropy"]
            h = h[np.isfinite(h)]
            return float(h.max()) if len(h) and h.max() > 0 else 1.0
        top = 0.0
        for c in checkpoints:
            kl = checkpoint_arrays(r, probe, c)["kl"]
            kl = kl[np.isfinite(kl)]
            if len(kl):
                top = max(top, float(kl.max()))
        return max(top, KL_LOW * 10)


def colour_scale(reader: StoreReader, probe: str, color_by: str, checkpoints: list[str]) -> tuple[float, float]:
    """(low, high) of the colour scale, the same for every sequence and checkpoint of the probe set:
    entropy 0 to the reference's largest; KL ``KL_LOW`` to the largest over ``checkpoints`` (log)."""
    top = _scale_cached(*_version(reader), probe, color_by, tuple(checkpoints))
    return (0.0, top) if color_by == "entropy" else (KL_LOW, top)


def fitted_scale(values: Any, color_by: str, fallback: tuple[float, float],
                 q: tuple[float, float] = (1.0, 99.0)) -> tuple[float, float]:
    """(low, high) fitted to the values shown: their ``q`` percentiles (1st-99th), within ``fallback`` (the
    probe set's global scale: a drift below its floor ``KL_LOW`` still reads as unchanged); ``fallback``
    itself when they span no range."""
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    if color_by != "entropy":
        v = v[v > 0]
    if len(v) < 2:
        return fallback
    lo, hi = (float(x) for x in np.percentile(v, q))
    lo, hi = max(lo, fallback[0]), min(hi, fallback[1])
    return (lo, hi) if hi > lo else fallback


def colour_fraction(value: float, scale: tuple[float, float], color_by: str) -> float | None:
    if not math.isfinite(value):
        return None
    lo, hi = scale
    if color_by == "entropy":
        return min(max((value - lo) / (hi - lo), 0.0), 1.0) if hi > lo else 0.0
    span = math.log10(hi) - math.log10(lo)
    return min(max((math.log10(max(value, lo)) - math.log10(lo)) / span, 0.0), 1.0)


def rgba(t: float, rgb: tuple[int, int, int]) -> str:
    return f"rgba({rgb[0]},{rgb[1]},{rgb[2]},{0.08 + 0.82 * t:.3f})"


def colour_ticks(scale: tuple[float, float], color_by: str) -> list[tuple[float, str]]:
    """(fraction along the bar, label) for the colour bar."""
    lo, hi = scale
    if color_by == "entropy":
        return [(f, f"{lo + f * (hi - lo):.2g}") for f in (0.0, 0.25, 0.5, 0.75, 1.0)]
    ticks = [(0.0, f"≤{lo:.3g}")]
    e = math.floor(math.log10(lo)) + 1
    while 10.0 ** e < hi:
        ticks.append((colour_fraction(10.0 ** e, scale, "drift") or 0.0, f"1e{e}"))
        e += 1
    if len(ticks) == 1:  # within one decade: the middle of the (log) bar
        ticks.append((0.5, f"{math.sqrt(lo * hi):.3g}"))
    ticks.append((1.0, f"{hi:.3g}"))
    return ticks


def hover(tok: TokenView, pinnable: bool = True) -> str:
    def alts(items: tuple[tuple[str, float], ...]) -> str:
        return ", ".join(f"{token_text_label(w)} {lp:.2f}" for w, lp in items)

    lines = [f"token {token_text_label(tok.text)!r}", f"reference entropy {tok.entropy:.3f} nats"]
    if not math.isnan(tok.logprob):
        lines.append(f"log p(token): reference {tok.ref_logprob:.3f}, checkpoint {tok.logprob:.3f} "
                     f"(Δ {tok.logprob - tok.ref_logprob:+.3f})")
        lines.append(f"KL {tok.kl:.3g} nats, JS {tok.js:.3g} nats" + ("; top-1 flipped" if tok.flipped else ""))
        lines.append(f"checkpoint's top: {alts(tok.alternatives)}")
    elif tok.status:
        lines.append(STATUS_TEXT.get(tok.status, "not scored"))
    else:
        lines.append(f"log p(token): reference {tok.ref_logprob:.3f}")
    lines.append(f"reference's top: {alts(tok.ref_alternatives)}")
    if pinnable:
        lines.append("click to pin")
    return "\n".join(lines)


def _shown(text: str) -> str:
    """HTML of a token's text: escaped, whitespace visible (marks in class ws), byte pieces named."""
    if text == "":
        return '<span class="ws">⟨b⟩</span>'
    out = []
    for ch in text:
        if ch in WHITESPACE_MARKS:
            mark, keep = WHITESPACE_MARKS[ch]
            out.append(f'<span class="ws">{mark}</span>{keep}')
        elif ch == BYTE_PIECE:  # bytes that do not decode (an unfinished character at the end)
            out.append('<span class="ws">⟨bytes⟩</span>')
        else:
            out.append(html.escape(ch))
    return "".join(out)


def text_html(tokens: list[TokenView], color_by: str, scale: tuple[float, float], pinnable: bool = True) -> str:
    """The coloured text of one sequence as HTML: one ``span.tok`` per token with ``data-i`` (its
    index) and a hover title; scored ones coloured on ``scale``, flips marked (class ``flip``),
    flagged positions black. Token texts are escaped (they are model output)."""
    rgb = ENTROPY_RGB if color_by == "entropy" else DRIFT_RGB
    parts = []
    for i, tok in enumerate(tokens):
        if not tok.scored:
            parts.append(f'<span class="tok unscored" data-i="{i}">{_shown(tok.text)}</span>')
            continue
        cls = "tok"
        if tok.status == 1:
            style = "background-color:#222;color:#fff"
            cls += " flagged"
        else:
            f = colour_fraction(tok.entropy if color_by == "entropy" else tok.kl, scale, color_by)
            style = f"background-color:{rgba(f, rgb)}" if f is not None else ""
        if tok.flipped:
            cls += " flip"
        parts.append(f'<span class="{cls}" data-i="{i}" title="{html.escape(hover(tok, pinnable), quote=True)}" '
                     f'style="{style}">{_shown(tok.text)}</span>')
    return "".join(parts)


def sequence_ids(reader: StoreReader, probe: str, seq: int) -> list[int]:
    o = reader.slice(f"{probe_key(probe)}/ids/offsets", slice(seq, seq + 2))
    return reader.slice(f"{probe_key(probe)}/ids/values", slice(int(o[0]), int(o[1]))).tolist()
