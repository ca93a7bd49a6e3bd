"""The token result types: ``aclarena-diag tokens``'s reference, scores and summaries, and how they are stored.

========================================= =================== ==============================================
key                                       result-type         payload
========================================= =================== ==============================================
``tokens/<probe>/reference``              ``token-reference`` :class:`TokenReferenceData`: the reference's
                                                              entropy, log-probs, top-k per scored position
``tokens/<probe>/scores/<checkpoint>``    ``token-scores``    :class:`TokenScoresData`: one checkpoint's
                                                              per-position arrays against it
``tokens/<probe>/summary/<checkpoint>``   ``token-summary``   :class:`TokenSummaryData`: its summary and
                                                              concentration curve
========================================= =================== ==============================================

All three at version 0.1.0; their elements are specified in docs/store-format.md. :mod:`aclarena.analysis.tokens`
makes the payloads (from the teacher-forced scoring's flat numpy arrays) and writes them with
:func:`write_token_results` (one atomic step per checkpoint). Whole results read back with :func:`read_reference`,
:func:`read_scores` and :func:`read_summary`; the Tokens page, the figures, ``export`` and the analyses that need
a few columns of a large probe set read them with the column, row and attribute readers below, which know the
same layout. Plain numpy and JSON here: no torch.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from aclarena.results import registry
from aclarena.results.registry import ResultType, Stored
from aclarena.store.results import ResultsStore, StoreReader

if TYPE_CHECKING:
    from aclarena.store.manifest import Manifest

ROOT = "tokens"
REFERENCE_TYPE = "token-reference"
SCORES_TYPE = "token-scores"
SUMMARY_TYPE = "token-summary"
RESULT_VERSION = "0.1.0"
# the ragged arrays of each type, in the order they are written (docs/store-format.md); every row is a sequence
#: a next-token distribution's statistics at each scored position, the reference's and every checkpoint's
DIST_FIELDS = ("entropy", "logprob", "top1", "topk_ids", "topk_logprobs")
REFERENCE_FIELDS = ("position", "token", *DIST_FIELDS, "status")
SCORE_FIELDS = (*DIST_FIELDS, "kl", "js", "status")
_TOPK = ("topk_ids", "topk_logprobs")


def tokens_key(probe: str) -> str:
    """Every token result of ``probe`` (``probe --force`` drops it with the probe set it replaces)."""
    return f"{ROOT}/{probe}"


def reference_key(probe: str) -> str:
    return f"{ROOT}/{probe}/reference"


def scores_key(probe: str, checkpoint: str | None = None) -> str:
    base = f"{ROOT}/{probe}/scores"
    return base if checkpoint is None else f"{base}/{checkpoint}"


def summary_key(probe: str, checkpoint: str | None = None) -> str:
    base = f"{ROOT}/{probe}/summary"
    return base if checkpoint is None else f"{base}/{checkpoint}"


# --- payloads ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class TokenReferenceData:
    """The reference's own statistics at every scored position of probe set ``probe`` (flat, probe order).

    Sequence ``i``'s positions are ``[offsets[i]:offsets[i + 1]]``: ``position`` (token index in its
    sequence), ``token`` (the reference token), ``entropy``, ``logprob``, ``top1``, ``topk_ids`` and
    ``topk_logprobs`` (``(positions, k)``), ``status`` (0 ok). ``settings``: what decides whether a rerun
    reuses it (probe digest, reference weights, top-k, dtype).
    """

    probe: str
    reference: str
    settings: dict[str, Any]
    n_positions: int
    n_invalid: int
    offsets: np.ndarray
    position: np.ndarray
    token: np.ndarray
    entropy: np.ndarray
    logprob: np.ndarray
    top1: np.ndarray
    topk_ids: np.ndarray
    topk_logprobs: np.ndarray
    status: np.ndarray
    key: str = ""


@dataclass(frozen=True)
class ScoresMeta:
    """A token-scores result's attributes, without its arrays: what a rerun, the summaries and the Tokens page read.

    ``settings`` None when the attribute is absent or not JSON; ``n_nonfinite`` and ``n_beyond_context`` 0
    when absent.
    """

    checkpoint: str
    reference: str
    settings: dict[str, Any] | None
    scores_id: str | None
    n_nonfinite: int = 0
    n_beyond_context: int = 0
    batch_size: int | None = None
    chunk_size: int | None = None


@dataclass(frozen=True)
class TokenScoresData:
    """One checkpoint's per-position results against the reference (flat arrays, the reference's rows).

    ``entropy``, ``logprob``, ``top1``, ``topk_ids``, ``topk_logprobs``, ``kl``, ``js`` (NaN where not
    scored) and ``status`` (0 scored, 1 non-finite logits, 2 beyond the checkpoint's maximum positions).
    """

    probe: str
    meta: ScoresMeta
    offsets: np.ndarray
    entropy: np.ndarray
    logprob: np.ndarray
    top1: np.ndarray
    topk_ids: np.ndarray
    topk_logprobs: np.ndarray
    kl: np.ndarray
    js: np.ndarray
    status: np.ndarray
    key: str = ""

    @property
    def checkpoint(self) -> str:
        return self.meta.checkpoint


@dataclass(frozen=True)
class TokenSummaryData:
    """One checkpoint's drift summary: ``summary`` holds the fields of
    :class:`~aclarena.diagnostics.token_drift.DriftSummary` (NaN as None, with the concentration curve);
    ``settings`` the ``high``, ``eps`` and ``scores_id`` of the scores it summarises."""

    probe: str
    checkpoint: str
    reference: str
    settings: dict[str, Any]
    summary: dict[str, Any]
    key: str = ""


TokenPayload = TokenReferenceData | TokenScoresData | TokenSummaryData


# --- writing ----------------------------------------------------------------------------------


def key_of(payload: TokenPayload) -> str:
    """Where ``payload`` is stored."""
    if isinstance(payload, TokenReferenceData):
        return reference_key(payload.probe)
    if isinstance(payload, TokenScoresData):
        return scores_key(payload.probe, payload.meta.checkpoint)
    return summary_key(payload.probe, payload.checkpoint)


def write_token_results(store: ResultsStore | str | os.PathLike[str], payloads: Sequence[TokenPayload], *,
                        overwrite: bool = True, manifest_text: str | None = None,
                        precondition: Callable[[StoreReader], None] | None = None) -> list[str]:
    """Write ``payloads`` (any of the three types, in order) in one atomic step; returns their keys.

    ``precondition`` is checked under the writer lock (:meth:`ResultsStore.write_many`): ``tokens`` refuses to
    write scores of a probe set that changed meanwhile.
    """
    if not payloads:
        return []
    store = store if isinstance(store, ResultsStore) else ResultsStore(store)
    items = [_TYPES[type(p)].item(key_of(p), p) for p in payloads]
    store.write_many(items, overwrite=overwrite, manifest_text=manifest_text, precondition=precondition)
    return [item[0] for item in items]


# --- reading whole results --------------------------------------------------------------------


def read_reference(reader: StoreReader, probe: str) -> TokenReferenceData:
    """The stored reference of ``probe``, every array read (a wrong shape is one line naming the key)."""
    data: TokenReferenceData = registry.read(reader, reference_key(probe), REFERENCE_TYPE)
    return data


def read_scores(reader: StoreReader, probe: str, checkpoint: str) -> TokenScoresData:
    """The stored scores of ``checkpoint`` on ``probe``, every array read."""
    data: TokenScoresData = registry.read(reader, scores_key(probe, checkpoint), SCORES_TYPE)
    return data


def read_summary(reader: StoreReader, probe: str, checkpoint: str) -> TokenSummaryData:
    """The stored summary of ``checkpoint`` on ``probe``."""
    data: TokenSummaryData = registry.read(reader, summary_key(probe, checkpoint), SUMMARY_TYPE)
    return data


# --- listing, attributes, columns and rows (what the page reads of a large probe set) -----------


def list_probes(reader: StoreReader | None) -> list[str]:
    """Probe sets that have token scores."""
    if reader is None or not reader.has(ROOT):
        return []
    return [p for p in reader.keys(ROOT) if reader.has(reference_key(p)) and reader.has(scores_key(p))]


def list_checkpoints(reader: StoreReader, probe: str, manifest: Manifest | None = None) -> list[str]:
    """Checkpoints scored and summarised on ``probe``, in manifest order when a manifest is given."""
    if not reader.has(scores_key(probe)):
        return []
    names = [n for n in reader.keys(scores_key(probe)) if reader.has(summary_key(probe, n))]
    if manifest is not None:
        order = {s.name: i for i, s in enumerate(manifest)}
        names.sort(key=lambda n: (order.get(n, len(order)), n))
    return names


def stored_settings(reader: StoreReader | ResultsStore, key: str) -> dict[str, Any] | None:
    """The ``settings`` attribute of the token result at ``key`` (None when absent or not a JSON object): a rerun
    reuses a result whose settings equal its own."""
    return _settings(reader.attrs(key).get("settings"))


def reference_name(reader: StoreReader, probe: str) -> str:
    """The checkpoint whose generations ``probe`` holds, as the stored reference records it."""
    return str(reader.attrs(reference_key(probe)).get("reference", probe))


def read_scores_meta(reader: StoreReader, probe: str, checkpoint: str) -> ScoresMeta:
    """The attributes of ``checkpoint``'s scores on ``probe`` (no array read)."""
    key = scores_key(probe, checkpoint)
    attrs = reader.attrs(key)
    with reader.damaged(key):
        return _meta(attrs, checkpoint)


def summary_rows(reader: StoreReader, probe: str, manifest: Manifest | None = None, *,
                 with_flags: bool = False) -> list[dict[str, Any]]:
    """One dict per checkpoint of :func:`list_checkpoints`: its stored summary and ``checkpoint`` (and,
    ``with_flags``, ``n_nonfinite`` and ``n_beyond_context`` of its scores)."""
    rows = []
    for name in list_checkpoints(reader, probe, manifest):
        s = dict(read_summary(reader, probe, name).summary)
        s["checkpoint"] = name
        if with_flags:
            meta = read_scores_meta(reader, probe, name)
            s["n_nonfinite"] = meta.n_nonfinite
            s["n_beyond_context"] = meta.n_beyond_context
        rows.append(s)
    return rows


def row_offsets(reader: StoreReader, probe: str) -> np.ndarray:
    """Sequence ``i``'s scored positions are ``[offsets[i]:offsets[i + 1]]`` of every column (checked)."""
    return reader.ragged(f"{reference_key(probe)}/{REFERENCE_FIELDS[2]}").offsets


def reference_columns(reader: StoreReader, probe: str, names: Iterable[str]) -> dict[str, np.ndarray]:
    """The reference's flat arrays ``names`` (of :data:`REFERENCE_FIELDS`), each over every scored position."""
    return _columns(reader, reference_key(probe), names, REFERENCE_FIELDS)


def scores_columns(reader: StoreReader, probe: str, checkpoint: str, names: Iterable[str]) -> dict[str, np.ndarray]:
    """``checkpoint``'s flat arrays ``names`` (of :data:`SCORE_FIELDS`), each over every scored position."""
    return _columns(reader, scores_key(probe, checkpoint), names, SCORE_FIELDS)


def sequence_values(reader: StoreReader, probe: str, checkpoint: str | None, names: Sequence[str],
                    seq: int) -> dict[str, list[Any]]:
    """Sequence ``seq``'s rows of the arrays ``names``, as lists: the reference's when ``checkpoint`` is None,
    else that checkpoint's scores. Reads two offsets and the rows, never a whole array."""
    if checkpoint is None:
        key, known = reference_key(probe), REFERENCE_FIELDS
    else:
        key, known = scores_key(probe, checkpoint), SCORE_FIELDS
    _known(names, known)
    o = reader.slice(f"{key}/{names[0]}/offsets", slice(seq, seq + 2))
    a, b = int(o[0]), int(o[1])
    return {k: reader.slice(f"{key}/{k}/values", slice(a, b)).tolist() for k in names}


# --- codecs -----------------------------------------------------------------------------------


def encode_reference(p: TokenReferenceData) -> tuple[dict[str, Any], dict[str, Any]]:
    """The elements and attributes of ``p`` (docs/store-format.md)."""
    attrs = {"settings": p.settings, "reference": p.reference, "n_positions": p.n_positions,
             "n_invalid": p.n_invalid}
    return _ragged(p, REFERENCE_FIELDS, p.offsets), attrs


def decode_reference(s: Stored) -> TokenReferenceData:
    """A current-version stored reference as its payload; a wrong shape raises (``reader.damaged`` makes it one
    line)."""
    a = s.attrs
    offsets, arrays = _arrays(s, REFERENCE_FIELDS)
    settings = _required_settings(a)
    return TokenReferenceData(probe=_probe(s.key), reference=str(a["reference"]), settings=settings,
                              n_positions=int(a["n_positions"]), n_invalid=int(a["n_invalid"]), offsets=offsets,
                              key=s.key, **arrays)


def encode_scores(p: TokenScoresData) -> tuple[dict[str, Any], dict[str, Any]]:
    """The elements and attributes of ``p`` (docs/store-format.md)."""
    m = p.meta
    attrs = {"settings": m.settings, "checkpoint": m.checkpoint, "reference": m.reference, "scores_id": m.scores_id,
             "n_nonfinite": m.n_nonfinite, "n_beyond_context": m.n_beyond_context, "batch_size": m.batch_size,
             "chunk_size": m.chunk_size}
    return _ragged(p, SCORE_FIELDS, p.offsets), attrs


def decode_scores(s: Stored) -> TokenScoresData:
    """A current-version stored scores result as its payload; a wrong shape raises."""
    offsets, arrays = _arrays(s, SCORE_FIELDS)
    _required_settings(s.attrs)
    meta = _meta(s.attrs, s.key.rsplit("/", 1)[-1])
    return TokenScoresData(probe=_probe(s.key), meta=meta, offsets=offsets, key=s.key, **arrays)


def encode_summary(p: TokenSummaryData) -> tuple[dict[str, Any], dict[str, Any]]:
    """The elements and attributes of ``p`` (docs/store-format.md)."""
    from aclarena.store.encoding import Json

    return {"summary": Json(p.summary)}, {"settings": p.settings, "checkpoint": p.checkpoint,
                                          "reference": p.reference}


def decode_summary(s: Stored) -> TokenSummaryData:
    """A current-version stored summary as its payload; a wrong shape raises."""
    a, summary = s.attrs, s.data.get("summary")
    if not isinstance(summary, dict):
        raise ValueError("summary is not a JSON object")  # one line naming the key, by ``reader.damaged``
    _expect(all(isinstance(summary.get(k), list) for k in ("curve_x", "curve_y")),
            "summary has no concentration curve (curve_x, curve_y)")
    settings = _required_settings(a)
    return TokenSummaryData(probe=_probe(s.key), checkpoint=str(a["checkpoint"]), reference=str(a["reference"]),
                            settings=settings, summary=summary, key=s.key)


TOKEN_REFERENCE = registry.register(ResultType(name=REFERENCE_TYPE, version=RESULT_VERSION,
                                               payload=TokenReferenceData, encode=encode_reference,
                                               decode=decode_reference, upgrades={}))
TOKEN_SCORES = registry.register(ResultType(name=SCORES_TYPE, version=RESULT_VERSION, payload=TokenScoresData,
                                            encode=encode_scores, decode=decode_scores, upgrades={}))
TOKEN_SUMMARY = registry.register(ResultType(name=SUMMARY_TYPE, version=RESULT_VERSION, payload=TokenSummaryData,
                                             encode=encode_summary, decode=decode_summary, upgrades={}))
_TYPES: dict[type, ResultType] = {TokenReferenceData: TOKEN_REFERENCE, TokenScoresData: TOKEN_SCORES,
                                  TokenSummaryData: TOKEN_SUMMARY}


def _expect(ok: bool, what: str) -> None:
    if not ok:
        raise ValueError(what)  # turned into one line naming the key by ``reader.damaged``


def _settings(raw: Any) -> dict[str, Any] | None:
    if raw is None:
        return None
    try:
        value = json.loads(raw) if isinstance(raw, str) else dict(raw)
    except (TypeError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def _required_settings(attrs: dict[str, Any]) -> dict[str, Any]:
    settings = _settings(attrs.get("settings"))
    if settings is None:
        raise ValueError("the settings attribute is not a JSON object")  # one line naming the key
    return settings


def _probe(key: str) -> str:
    parts = key.strip("/").split("/")
    _expect(len(parts) >= 3 and parts[0] == ROOT, f"{key} is not under {ROOT}/<probe>/")
    return parts[1]


def _optional_int(v: Any) -> int | None:
    return None if v is None or v == "null" else int(v)


def _meta(attrs: dict[str, Any], checkpoint: str) -> ScoresMeta:
    scores_id = attrs.get("scores_id")
    return ScoresMeta(checkpoint=str(attrs.get("checkpoint", checkpoint)),
                      reference=str(attrs.get("reference", "")), settings=_settings(attrs.get("settings")),
                      scores_id=None if scores_id is None else str(scores_id),
                      n_nonfinite=int(attrs.get("n_nonfinite", 0)),
                      n_beyond_context=int(attrs.get("n_beyond_context", 0)),
                      batch_size=_optional_int(attrs.get("batch_size")),
                      chunk_size=_optional_int(attrs.get("chunk_size")))


def _ragged(p: Any, names: Sequence[str], offsets: np.ndarray) -> dict[str, Any]:
    from aclarena.store.encoding import Ragged

    return {k: Ragged(values=getattr(p, k), offsets=offsets) for k in names}


def _arrays(s: Stored, names: Sequence[str]) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """The ragged elements ``names`` of ``s`` as flat arrays over shared offsets, each checked."""
    from aclarena.store.encoding import Ragged

    missing = [k for k in names if not isinstance(s.data.get(k), Ragged)]
    _expect(not missing, f"{', '.join(missing)} {'is' if len(missing) == 1 else 'are'} not stored as ragged arrays")
    offsets = np.asarray(s.data[names[0]].offsets)
    out: dict[str, np.ndarray] = {}
    for k in names:
        r = s.data[k]
        _expect(np.array_equal(np.asarray(r.offsets), offsets), f"{k} does not have the rows of {names[0]}")
        v = np.asarray(r.values)
        _expect(v.ndim == (2 if k in _TOPK else 1), f"{k} is not {'2' if k in _TOPK else '1'}-d")
        out[k] = v
    _expect(out["topk_ids"].shape == out["topk_logprobs"].shape, "topk_ids and topk_logprobs differ in shape")
    return offsets, out


def _known(names: Iterable[str], known: Sequence[str]) -> None:
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ValueError(f"no stored token array {', '.join(unknown)}; known: {', '.join(known)}")


def _columns(reader: StoreReader, key: str, names: Iterable[str], known: Sequence[str]) -> dict[str, np.ndarray]:
    names = list(names)
    _known(names, known)
    return {k: reader.ragged(f"{key}/{k}").all() for k in names}

