"""Token drift between two models in memory: no run folder, no store.

:func:`token_drift` scores ``model`` teacher-forced on a probe set (frozen sequences of the
``reference`` model) and summarizes where it moved, as ``aclarena-diag tokens`` does for the
checkpoints of a run. The probe set is a :class:`~aclarena.results.probes.ProbeSet` or prompts,
which the reference completes first (greedy, with its tokenizer).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from aclarena.diagnostics.token_drift import DriftSummary, HighEntropy, high_entropy_mask, summarize_drift
from aclarena.errors import AclarenaError
from aclarena.probes.generation import GenerationSettings, generate_probe_set, model_max_length
from aclarena.probes.teacher_forcing import TokenScores, score
from aclarena.results.probes import ProbeSet

Prompt = str | Mapping[str, Any]


@dataclass(frozen=True)
class ModelDrift:
    """Drift of one model against a reference on one probe set: the summary and every position's scores."""

    summary: DriftSummary
    scores: TokenScores
    probe: ProbeSet
    high: str

    def positions(self) -> Any:
        """DataFrame, one row per scored position: ``sequence``, ``position`` (token index in its sequence),
        ``token``, the reference's ``entropy_ref``, ``logprob_ref``, ``top1_ref``, the model's ``entropy``,
        ``logprob``, ``top1``, ``kl``, ``js``, ``status`` (0 = valid) and ``high`` (high-entropy set)."""
        s, ref = self.scores, self.scores.ref
        lengths = np.diff(s.offsets)
        h = ref.entropy.astype(np.float64)
        ok = np.isfinite(h) & np.isfinite(ref.logprob.astype(np.float64))
        high = np.zeros(h.shape, dtype=bool)
        high[np.flatnonzero(ok)[high_entropy_mask(h[ok], HighEntropy.parse(self.high))[0]]] = True
        return _frame({
            "sequence": np.repeat(np.arange(len(lengths)), lengths), "position": ref.position, "token": ref.token,
            "entropy_ref": ref.entropy, "logprob_ref": ref.logprob, "top1_ref": ref.top1,
            "entropy": s.entropy, "logprob": s.logprob, "top1": s.top1, "kl": s.kl, "js": s.js,
            "status": s.status, "high": high})

    def to_pandas(self) -> Any:
        """The same as :meth:`positions`."""
        return self.positions()

    def to_dict(self) -> dict[str, Any]:
        """The summary as plain data (strict JSON: NaN as None)."""
        return self.summary.to_dict()


def _frame(columns: dict[str, np.ndarray]) -> Any:
    import pandas as pd

    return pd.DataFrame(columns)


def token_drift(
    reference: Any,
    model: Any,
    probe: ProbeSet | Sequence[Prompt],
    *,
    tokenizer: Any = None,
    high: str = "q=0.06",
    eps: float = 0.05,
    max_new_tokens: int = 64,
    batch_size: int = 8,
    chunk_size: int | None = None,
    topk: int = 5,
) -> ModelDrift:
    """Teacher-forced drift of ``model`` against ``reference`` (two transformers causal LMs in memory).

    Args:
        reference: the model whose frozen sequences are scored (the earlier checkpoint).
        model: the model to score (a later checkpoint; PEFT-wrapped or not).
        probe: a ProbeSet, or prompts (strings, or ``{"messages": [...]}`` chats, rendered with the chat
            template, or as plain text when ``tokenizer`` has none) that ``reference`` completes greedily
            with ``tokenizer`` (up to ``max_new_tokens``); its completions are scored.
        high: the high-entropy set, ``q=FRACTION`` of positions or ``nats=THRESHOLD``.
        eps: |Δ log-prob| below which a position barely moves.
    """
    try:
        parsed = HighEntropy.parse(high)
    except ValueError as e:
        raise AclarenaError(f"high: {e}") from None
    if not isinstance(probe, ProbeSet):
        if isinstance(probe, str | bytes) or not isinstance(probe, Sequence) or not probe:
            raise AclarenaError("probe must be a ProbeSet or a non-empty list of prompts (strings or chats)")
        if tokenizer is None:
            raise AclarenaError("prompts need the reference's tokenizer: pass tokenizer=...")
        prompts = [{"prompt": p} if isinstance(p, str) else dict(p) for p in probe]
        from aclarena.models.chat import choose_prompt_format, has_template

        # chats rendered as eval renders them: plain text for a tokenizer without a chat template (issue 45)
        fmt = choose_prompt_format(None, has_template(tokenizer), checkpoint="reference")[0]
        made = generate_probe_set(reference, tokenizer, prompts, name="in-memory", reference="reference",
                                  settings=GenerationSettings(max_new_tokens=max_new_tokens),
                                  max_length=model_max_length(reference), prompt_format=fmt)
        assert made is not None  # one process
        probe = made
    res = score(model, reference, probe, batch_size=batch_size, chunk_size=chunk_size, topk=topk)
    summary = summarize_drift(res.ref.entropy, res.ref.logprob, res.ref.top1, res.kl, res.js, res.logprob, res.top1,
                              high=parsed, eps=eps, valid=res.status == 0)
    return ModelDrift(summary=summary, scores=res, probe=probe, high=str(parsed))
