"""Score one typed prompt live: the reference and a checkpoint, teacher-forced on the prompt's tokens.

The Tokens page's "score your own prompt" box calls :func:`score_prompt`. The prompt's text is
tokenized with the reference's tokenizer (as plain text, no chat template) and every token after
the first is scored by the same core as ``aclarena-diag tokens``
(:func:`aclarena.probes.teacher_forcing.score`: the reference's entropy and top-k, the
checkpoint's log-prob, exact KL(p_ref ‖ p_ckpt) and JS per position), on the CPU.

It is meant for small models: before anything is loaded, each model's size is read from its
``config.json`` (:func:`aclarena.models.config_checks.config_parameters`, or the safetensors
headers when larger) and a model above :data:`MAX_PARAMETERS` is refused, as are checkpoints
whose weights are missing and empty prompts, each with one line (:class:`PromptRefused`).
Loaded models are kept in a least-recently-used cache of :data:`CACHE_SIZE` (the reference and
the checkpoint being compared), so a second prompt costs only the forward passes.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from aclarena.errors import AclarenaError

if TYPE_CHECKING:
    from aclarena.store.manifest import Manifest

#: Models above this many parameters are not loaded by the dashboard (CPU, interactive).
MAX_PARAMETERS = 500_000_000
#: Models kept loaded: the reference and the checkpoint it is compared with.
CACHE_SIZE = 2
#: Tokens scored at most (the prompt is cut there, and says so).
MAX_TOKENS = 512
TOPK = 5


class PromptRefused(AclarenaError):
    """The prompt cannot be scored; the message is one line for the page."""


@dataclass(frozen=True)
class PromptScores:
    """A prompt scored teacher-forced: per token its text, and at scored tokens (all but the first)
    the reference's and the checkpoint's values, as flat arrays over the scored positions."""

    reference: str
    checkpoint: str
    ids: list[int]
    pieces: list[str]
    scores: Any  # aclarena.probes.teacher_forcing.TokenScores
    words: dict[int, str] = field(default_factory=dict)  # text of every top-k token id shown
    notes: list[str] = field(default_factory=list)


def model_size(name: str, manifest: Manifest, run_dir: str | os.PathLike[str]) -> int:
    """Parameters of checkpoint ``name`` read without loading it (an adapter counts its base); a
    :class:`PromptRefused` when it is not a local checkpoint with weights."""
    from aclarena.models.checkpoint import inspect
    from aclarena.models.config_checks import config_parameters

    spec = manifest.resolve(name)
    info = inspect(spec, manifest, run_dir)
    if info.source == "hub":
        raise PromptRefused(f"{name} is a hub id ({info.location}), not a local folder: the dashboard scores local "
                            "checkpoints only")
    n = config_parameters(info.config) if info.config else None
    if n is not None and n > MAX_PARAMETERS:  # refused before the weights are even looked at
        raise PromptRefused(_too_large(name, n))
    if info.problem is not None:
        raise PromptRefused(f"{name} cannot be loaded: {info.problem}")
    total = max(n or 0, info.n_parameters or 0)
    if info.source == "adapter" and spec.on is not None:
        total += model_size(spec.on, manifest, run_dir)
    if total > MAX_PARAMETERS:
        raise PromptRefused(_too_large(name, total))
    return total


def _too_large(name: str, n: int) -> str:
    return (f"{name} has about {n / 1e6:,.0f}M parameters, above the {MAX_PARAMETERS / 1e6:,.0f}M the dashboard "
            "loads on the CPU; score it with `aclarena-diag probe` and `aclarena-diag tokens` instead")


class ModelCache:
    """Loaded models by (run folder, checkpoint, its files' modification time), least recently used
    dropped first. One lock: two requests never load the same model twice."""

    def __init__(self, size: int = CACHE_SIZE) -> None:
        self.size = size
        self._items: OrderedDict[tuple[str, str, int], Any] = OrderedDict()
        self.lock = threading.Lock()
        self.loads = 0

    def get(self, name: str, manifest: Manifest, run_dir: str | os.PathLike[str]) -> Any:
        from aclarena.models.checkpoint import inspect
        from aclarena.models.loading import LoadOptions, load_model

        info = inspect(manifest.resolve(name), manifest, run_dir)
        try:
            stamp = os.stat(info.location).st_mtime_ns
        except OSError:
            stamp = 0
        key = (str(Path(run_dir).resolve()), name, stamp)
        if key in self._items:
            self._items.move_to_end(key)
            return self._items[key]
        from aclarena.progress import quiet_libraries

        quiet_libraries()  # no per-file loading bars in the dashboard's console
        model = load_model(name, manifest, run_dir, LoadOptions(dtype="float32", device="cpu", merge_adapter=True))
        self.loads += 1
        self._items[key] = model
        while len(self._items) > self.size:
            self._items.popitem(last=False)
        return model

    def names(self) -> list[str]:
        return [k[1] for k in self._items]


MODELS = ModelCache()


def score_prompt(run_dir: str | os.PathLike[str], text: str | None, reference: str, checkpoint: str, *,
                 cache: ModelCache | None = None) -> PromptScores:
    """Score ``text`` teacher-forced with ``checkpoint`` against ``reference`` (names of the run's
    manifest); :class:`PromptRefused` (one line) for an empty prompt, a model that is too large or
    has no weights, or a prompt of a single token."""
    from aclarena.models.loading import load_tokenizer
    from aclarena.probes.probe_set import token_pieces
    from aclarena.probes.teacher_forcing import score
    from aclarena.results.probes import ProbeSet
    from aclarena.store.manifest import load_manifest

    if text is None or not text.strip():
        raise PromptRefused("type a prompt to score (the box is empty)")
    manifest = load_manifest(run_dir)
    for name in (reference, checkpoint):
        if name not in manifest:
            raise PromptRefused(f"{name!r} is not a checkpoint of this run")
        model_size(name, manifest, run_dir)
    cache = MODELS if cache is None else cache
    tokenizer = load_tokenizer(reference, manifest, run_dir)
    ids = [int(i) for i in tokenizer(text)["input_ids"]]
    notes = []
    if len(ids) > MAX_TOKENS:
        notes.append(f"the prompt was cut from {len(ids)} to its first {MAX_TOKENS} tokens")
        ids = ids[:MAX_TOKENS]
    if len(ids) < 2:
        raise PromptRefused("the prompt is a single token: nothing to predict; type a longer one")
    pieces = token_pieces(tokenizer, ids)
    mask = np.ones(len(ids), dtype=bool)
    mask[0] = False
    probe = ProbeSet(name="prompt", reference=reference, ids=[np.asarray(ids, dtype=np.int64)], scored=[mask],
                     texts=["".join(pieces)], token_text=[pieces], sources=[{"text": text}])
    with cache.lock:
        ref_model = cache.get(reference, manifest, run_dir)
        model = cache.get(checkpoint, manifest, run_dir)
        res = score(model, ref_model, probe, batch_size=1, topk=TOPK, name=checkpoint)
    shown = np.unique(np.concatenate([res.topk_ids.ravel(), res.ref.topk_ids.ravel()]))
    words = {int(i): str(tokenizer.decode([int(i)], skip_special_tokens=False, clean_up_tokenization_spaces=False))
             for i in shown if i >= 0}
    return PromptScores(reference=reference, checkpoint=checkpoint, ids=ids, pieces=pieces, scores=res, words=words,
                        notes=notes)
