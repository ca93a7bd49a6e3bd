"""The ``probe-set`` result type: a reference checkpoint's frozen sequences and the positions that get scored.

A probe set sits at ``probes/<probe>`` (result type ``probe-set``, version 0.1.0); its elements are
specified in docs/store-format.md. The payload is :class:`ProbeSet`: per sequence, the token ids of
prompt and response and a ``scored`` mask: ``scored[t]`` is True when token ``t`` was produced by the
model itself (an assistant turn), so that teacher-forced scoring compares checkpoints only where the
model decides. Prompts, system and user turns and tool observations are context, never scored, even
when a multi-turn agent trace interleaves them with assistant turns.

:mod:`aclarena.probes.generation` (the reference generates on prompts) and
:func:`aclarena.probes.probe_set.probe_set_from_conversations` (``--from-traces``, the arena's rollouts)
make the payload; ``probe``, ``tokens``, ``signatures`` and the drift monitor write it with
:func:`write_probe_set` and read it with :func:`read_probe_set`. The token results scored on a probe set
(``tokens/<probe>/...``) are owned by :mod:`aclarena.results.tokens`. Plain numpy and JSON here: no torch.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from aclarena.errors import AclarenaError, unknown_name
from aclarena.results import registry
from aclarena.results.registry import ResultType, Stored
from aclarena.results.tokens import tokens_key
from aclarena.store.results import ResultsStore, StoreReader

PROBES = "probes"
RESULT_TYPE = "probe-set"
RESULT_VERSION = "0.1.0"
# the elements read only for the text (left out by ``read_probe_set(..., with_text=False)``)
TEXT_PARTS = ("token_text", "text", "vocab")
_PARTS = ("ids", "scored", "source", "settings", "warnings")


def probe_key(probe: str) -> str:
    return f"{PROBES}/{probe}"


@dataclass(frozen=True)
class ProbeSet:
    """Frozen sequences of a reference checkpoint and the positions scored on them.

    Attributes:
        name: the probe set's name (its key under ``probes/``).
        reference: the manifest name of the checkpoint whose sequences these are.
        ids: per sequence, int token ids of prompt and response.
        scored: per sequence, a bool mask of the same length: True where the model
            generated the token (never the first token, which has no prediction).
        texts: per sequence, the decoded text.
        token_text: per sequence, each token's text (their concatenation is the text).
        sources: per sequence, what it was made from (prompt, messages, tools).
        settings: how the set was made (source, generation settings, tokenizer).
        warnings: what was changed on the way (truncations), one line each.
        vocab: the text of every token id (shows top alternatives without a tokenizer).
    """

    name: str
    reference: str
    ids: list[np.ndarray]
    scored: list[np.ndarray]
    texts: list[str]
    token_text: list[list[str]]
    sources: list[Any]
    settings: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    vocab: list[str] | None = None

    def __post_init__(self) -> None:
        n = len(self.ids)
        if n == 0:
            raise AclarenaError(f"probe set {self.name!r} has no sequences; give at least one prompt or trace")
        for what in ("scored", "texts", "token_text", "sources"):
            if len(getattr(self, what)) != n:
                raise ValueError(f"probe set {self.name!r}: {what} has {len(getattr(self, what))} entries for {n} sequences")
        for i, (ids, mask, pieces) in enumerate(zip(self.ids, self.scored, self.token_text, strict=True)):
            if len(ids) != len(mask) or len(ids) != len(pieces):
                raise ValueError(f"probe set {self.name!r}: sequence {i} has {len(ids)} ids, {len(mask)} mask entries "
                                 f"and {len(pieces)} token texts")
            if len(mask) and bool(mask[0]):
                raise ValueError(f"probe set {self.name!r}: sequence {i} scores its first token, which has no prediction")
        if self.n_scored == 0:
            raise AclarenaError(
                f"probe set {self.name!r} has no scored tokens (no assistant tokens in any sequence); "
                "give traces with assistant turns or prompts to generate from"
            )

    @property
    def n_sequences(self) -> int:
        return len(self.ids)

    @property
    def n_tokens(self) -> int:
        return int(sum(len(x) for x in self.ids))

    @property
    def n_scored(self) -> int:
        return int(sum(int(np.count_nonzero(m)) for m in self.scored))

    @property
    def max_length(self) -> int:
        return max(len(x) for x in self.ids)

    def positions(self, i: int) -> np.ndarray:
        """Indices ``t`` of the scored tokens of sequence ``i`` (predicted from position ``t - 1``)."""
        return np.flatnonzero(np.asarray(self.scored[i], dtype=bool))

    def scored_offsets(self) -> np.ndarray:
        """Row offsets of the per-position arrays: sequence ``i``'s scores are ``[o[i]:o[i+1]]``."""
        counts = [int(np.count_nonzero(m)) for m in self.scored]
        out = np.zeros(len(counts) + 1, dtype=np.int64)
        np.cumsum(counts, out=out[1:])
        return out

    @property
    def digest(self) -> str:
        """A hash of ids and masks: scores made on another probe set are never reused."""
        h = hashlib.sha256()
        for ids, mask in zip(self.ids, self.scored, strict=True):
            h.update(np.asarray(ids, dtype=np.int64).tobytes())
            h.update(b"|")
            h.update(np.asarray(mask, dtype=np.bool_).tobytes())
            h.update(b"#")
        return h.hexdigest()[:16]


def printable(text: str) -> str:
    """HDF5 strings cannot hold NUL: show it as the NUL symbol (U+2400)."""
    return text.replace("\x00", "\u2400")


# --- writing and reading ----------------------------------------------------------------------


def list_probe_sets(store: ResultsStore) -> list[str]:
    """The names of the stored probe sets (none when there is no results.h5 yet)."""
    if not store.exists():
        return []
    with store.reader() as r:
        return r.keys(PROBES) if r.has(PROBES) else []


def write_probe_set(store: ResultsStore, probe: ProbeSet, *, overwrite: bool = False,
                    manifest_text: str | None = None) -> None:
    """Store a probe set; replacing one drops its token results in the same atomic step (scores of
    other sequences must never sit beside the new ones, not even after a kill)."""
    store.write_many([PROBE_SET.item(probe_key(probe.name), probe)], overwrite=overwrite,
                     manifest_text=manifest_text, drop=[tokens_key(probe.name)] if overwrite else [])


def require_probe_digest(name: str, digest: str) -> Callable[[StoreReader], None]:
    """A store-write precondition: the probe set ``name`` is still the one (``digest``) the results
    were computed on (``probe --force`` may have replaced it while ``tokens`` ran)."""

    def check(reader: StoreReader) -> None:
        key = probe_key(name)
        now = reader.attrs(key).get("digest") if reader.has(key) else None
        if now != digest:
            raise AclarenaError(f"probe set {name!r} was replaced while these scores were computed (by probe "
                                "--force?); nothing was written: rerun tokens")

    return check


def read_probe_set(store: ResultsStore, name: str, *, with_text: bool = True) -> ProbeSet:
    """Read ``probes/<name>``; unknown names fail with the known ones and a did-you-mean. ``with_text=False``
    leaves the texts, token texts and vocabulary unread (empty strings and None: what scoring needs)."""
    known = list_probe_sets(store)
    if name not in known:
        raise unknown_name("probe set", name, known, hint="make one with `aclarena-diag probe --ref NAME`")
    with store.reader() as r:
        if with_text:
            data: ProbeSet = registry.read(r, probe_key(name), RESULT_TYPE)
        else:
            data = registry.read_part(r, probe_key(name), RESULT_TYPE, _PARTS)
        return data


# --- codec ------------------------------------------------------------------------------------


def encode_probe_set(p: ProbeSet) -> tuple[dict[str, Any], dict[str, Any]]:
    """The elements and attributes of ``p`` (docs/store-format.md)."""
    from aclarena.store.encoding import Json, Ragged

    data: dict[str, Any] = {
        "ids": Ragged.from_rows([np.asarray(x, dtype=np.int32) for x in p.ids], dtype=np.int32),
        "scored": Ragged.from_rows([np.asarray(m, dtype=bool) for m in p.scored], dtype=bool),
        "token_text": [printable(t) for pieces in p.token_text for t in pieces],
        "text": [printable(t) for t in p.texts],
        "source": Json(list(p.sources)),
        "settings": Json(dict(p.settings)),
        "warnings": Json(list(p.warnings)),
    }
    if p.vocab is not None:
        data["vocab"] = [printable(v) for v in p.vocab]
    attrs = {
        "reference": p.reference,
        "n_sequences": p.n_sequences,
        "n_tokens": p.n_tokens,
        "n_scored": p.n_scored,
        "digest": p.digest,
        "source_kind": str(p.settings.get("source", "")),
    }
    return data, attrs


def decode_probe_set(s: Stored) -> ProbeSet:
    """A current-version stored probe set as its payload; a missing element or a wrong shape raises
    (``reader.damaged`` makes it one line). Read without its text parts (``token_text``, ``text`` and
    ``vocab`` all left out: :func:`read_probe_set`'s ``with_text=False``), the texts are empty and ``vocab``
    None."""
    d = s.data
    if not s.key.startswith(f"{PROBES}/"):
        raise ValueError(f"{s.key} is not under {PROBES}/")  # one line naming the key, by ``reader.damaged``
    ids, scored = d["ids"], d["scored"]
    if any(k in d for k in TEXT_PARTS):
        offsets = ids.offsets
        flat = d["token_text"]
        token_text = [flat[int(offsets[i]):int(offsets[i + 1])] for i in range(ids.n_rows)]
        texts = list(d["text"])
        vocab = d.get("vocab")
    else:
        token_text = [[""] * len(row) for row in ids.rows()]
        texts = [""] * ids.n_rows
        vocab = None
    return ProbeSet(
        name=s.key[len(PROBES) + 1:], reference=str(s.attrs["reference"]), ids=[np.asarray(x) for x in ids.rows()],
        scored=[np.asarray(x, dtype=bool) for x in scored.rows()], texts=texts, token_text=token_text,
        sources=list(d["source"]), settings=dict(d["settings"]), warnings=list(d["warnings"]), vocab=vocab,
    )


PROBE_SET = registry.register(ResultType(name=RESULT_TYPE, version=RESULT_VERSION, payload=ProbeSet,
                                         encode=encode_probe_set, decode=decode_probe_set, upgrades={}))
