"""Freezing a reference checkpoint's generations on prompts: the probe sets of ``aclarena-diag probe``.

Generation is batched with LEFT padding (a tokenizer saved by trl's SFTTrainer reloads
with ``padding_side='right'``, which silently corrupts batched ``generate``), seeded, and
greedy unless a temperature is given. Every sequence stays within the model's maximum
positions: long prompts are cut from the left and the number of new tokens is capped,
each with a warning recorded in the probe set.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from aclarena.errors import AclarenaError
from aclarena.models.arch import context_length
from aclarena.models.chat import cut_reply, render_prompt, reply_stopping, stop_token_ids
from aclarena.probes.probe_set import token_pieces, vocab_strings
from aclarena.results.probes import ProbeSet

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    from aclarena.distributed import World


@dataclass(frozen=True, slots=True)
class GenerationSettings:
    """How the reference generates: ``temperature`` 0 is greedy decoding."""

    max_new_tokens: int = 128
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int = 0
    batch_size: int = 8

    def __post_init__(self) -> None:
        if not isinstance(self.max_new_tokens, int) or self.max_new_tokens < 1:
            raise AclarenaError(f"--max-new-tokens must be an integer >= 1, got {self.max_new_tokens!r}")
        if not (isinstance(self.temperature, int | float) and math.isfinite(self.temperature) and self.temperature >= 0):
            raise AclarenaError(f"--temperature must be a number >= 0 (0 = greedy), got {self.temperature!r}")
        if not (isinstance(self.top_p, int | float) and 0 < self.top_p <= 1):
            raise AclarenaError(f"top_p must be in (0, 1], got {self.top_p!r}")
        if not isinstance(self.seed, int):
            raise AclarenaError(f"--seed must be an integer, got {self.seed!r}")
        if not isinstance(self.batch_size, int) or self.batch_size < 1:
            raise AclarenaError(f"--batch-size must be an integer >= 1, got {self.batch_size!r}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self) | {"greedy": self.greedy}


def model_max_length(model: Any) -> int | None:
    """The model's maximum positions (:func:`aclarena.models.arch.context_length`; None when it has no limit),
    or a vLLM engine's ``max_model_len``."""
    if not hasattr(model, "config") and hasattr(model, "llm_engine"):  # a vLLM engine
        return int(model.llm_engine.model_config.max_model_len)
    return context_length(model.config)


def encode_prompt(tokenizer: PreTrainedTokenizerBase, prompt: Mapping[str, Any], prompt_format: str = "chat"
                  ) -> list[int]:
    """Token ids of one prompt: messages rendered in ``prompt_format`` (the chat template with a generation
    prompt, or plain text: :func:`aclarena.models.chat.render_prompt`), or a ``prompt`` line's raw text."""
    if "messages" in prompt:
        if prompt_format == "chat" and not getattr(tokenizer, "chat_template", None):
            raise AclarenaError("the reference's tokenizer has no chat template, so chat prompts cannot be rendered; "
                                'use {"prompt": "..."} lines, prompt_format = "plain" or add a chat template')
        try:
            text = render_prompt(tokenizer, list(prompt["messages"]), prompt.get("tools"), prompt_format=prompt_format)
        except Exception as e:
            raise AclarenaError(f"the chat template cannot render a prompt: {str(e).splitlines()[0]}") from None
        return [int(x) for x in tokenizer(text, add_special_tokens=False)["input_ids"]]
    return [int(x) for x in tokenizer(prompt["prompt"], add_special_tokens=True)["input_ids"]]


def generate_probe_set(  # noqa: C901
    model: Any,
    tokenizer: PreTrainedTokenizerBase,
    prompts: Sequence[Mapping[str, Any]],
    *,
    name: str,
    reference: str,
    settings: GenerationSettings = GenerationSettings(),
    max_length: int | None = None,
    source: str = "prompts",
    progress: Callable[[int], None] | None = None,
    world: World | None = None,
    prompt_format: str = "chat",
) -> ProbeSet | None:
    """Generate from ``model`` (a transformers causal LM, or a vLLM engine) on ``prompts`` and freeze the
    result as a probe set.

    ``messages`` prompts are rendered in ``prompt_format`` (:func:`aclarena.models.chat.render_prompt`);
    a ``plain`` one's generation also ends where its reply does (:func:`aclarena.models.chat.reply_end`).

    Each prompt is ``{"messages": [...], "tools": [...]}`` (rendered with the chat template)
    or ``{"prompt": "text"}``. The generated tokens (up to and including the stop token:
    an end-of-sequence token or the chat template's end of turn, :func:`aclarena.models.chat.stop_token_ids`)
    are the scored positions. ``max_length`` defaults to the model's maximum positions.

    With a data-parallel ``world`` (:mod:`aclarena.distributed`) each rank generates its
    round-robin share of the batches (each seeded by its batch index, as in one process);
    rank 0 gets the probe set and the other ranks None.
    """
    import torch

    if not prompts:
        raise AclarenaError("no prompts to generate from; give at least one")
    limit = max_length if max_length is not None else (model_max_length(model) or (1 << 30))
    if limit < 2:
        raise AclarenaError(f"the model's maximum positions ({limit}) leave no room to generate")
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    if pad_id is None:
        raise AclarenaError("the reference's tokenizer has neither a pad nor an end-of-sequence token; set one")
    stop = stop_token_ids(model, tokenizer, required=False)  # the template's end of turn included
    warnings: list[str] = []
    encoded = []
    for i, p in enumerate(prompts):
        ids = encode_prompt(tokenizer, p, prompt_format)
        if not ids:
            raise AclarenaError(f"prompt {i} is empty after tokenization; give some text")
        if len(ids) > limit - 1:
            warnings.append(f"prompt {i} cut from {len(ids)} to its last {limit - 1} tokens "
                            f"(the model's maximum positions are {limit})")
            ids = ids[-(limit - 1):]
        encoded.append(ids)
    order = sorted(range(len(encoded)), key=lambda i: (len(encoded[i]), i))
    from aclarena.models.vllm_engine import is_vllm

    vllm = is_vllm(model)
    device = None if vllm else next(model.parameters()).device

    def generate_batches(mine: list[int]) -> tuple[dict[int, list[int]], int]:
        results: dict[int, list[int]] = {}
        capped = 0
        mine_set = set(mine)
        for b, start in enumerate(range(0, len(order), settings.batch_size)):
            if b not in mine_set:
                continue
            idx = order[start:start + settings.batch_size]
            width = max(len(encoded[i]) for i in idx)
            new = min(settings.max_new_tokens, limit - width)
            if new < settings.max_new_tokens:
                capped += len(idx)
            input_ids = torch.full((len(idx), width), pad_id, dtype=torch.long)
            attention = torch.zeros((len(idx), width), dtype=torch.long)
            for r, i in enumerate(idx):  # left padding
                input_ids[r, width - len(encoded[i]):] = torch.tensor(encoded[i])
                attention[r, width - len(encoded[i]):] = 1
            kwargs: dict[str, Any] = {"max_new_tokens": new, "pad_token_id": pad_id, "eos_token_id": stop or None}
            if settings.greedy:
                kwargs["do_sample"] = False
            else:
                kwargs.update(do_sample=True, temperature=float(settings.temperature), top_p=float(settings.top_p),
                              top_k=0, repetition_penalty=1.0)
            if vllm:  # --engine vllm: token-id prompts, one seed per batch as below
                from aclarena.models.vllm_engine import generate_ids, sampling_params

                gen = generate_ids(model, [encoded[i] for i in idx], sampling_params(
                    max_new_tokens=new, do_sample=not settings.greedy, temperature=settings.temperature,
                    top_p=settings.top_p, seed=settings.seed + b, stop_token_ids=stop))
            else:
                torch.manual_seed(settings.seed + b)
                stopping = reply_stopping(tokenizer, width, prompt_format, ["messages" in prompts[i] for i in idx])
                if stopping is not None:
                    kwargs["stopping_criteria"] = stopping
                with torch.no_grad():
                    out = model.generate(input_ids=input_ids.to(device), attention_mask=attention.to(device),
                                         **kwargs)
                gen = out[:, width:].cpu().tolist()
            for r, i in enumerate(idx):
                toks = gen[r]
                cut = next((j + 1 for j, t in enumerate(toks) if t in stop), len(toks))
                results[i] = toks[:cut]
                if "messages" in prompts[i] and prompt_format != "chat":  # where the plain reply ends
                    results[i] = cut_reply(tokenizer, results[i], prompt_format)[0]
            if progress is not None:
                progress(len(idx))
        return results, capped

    n_batches = -(-len(order) // settings.batch_size)
    if world is None:
        results, capped = generate_batches(list(range(n_batches)))
    else:  # every rank generates its share; rank 0 gets all of them (errors reach every rank)
        parts = world.map_batches(n_batches, generate_batches)
        if parts is None:
            return None
        results, capped = {}, 0
        for r, c in parts:
            results.update(r)
            capped += c
    if capped:
        warnings.append(f"generation capped below {settings.max_new_tokens} new tokens for {capped} prompts "
                        f"to fit the model's {limit} positions")
    ids_out, masks, pieces, texts, sources = [], [], [], [], []
    for i, p in enumerate(prompts):
        seq = np.asarray(encoded[i] + results[i], dtype=np.int32)
        mask = np.zeros(len(seq), dtype=bool)
        mask[len(encoded[i]):] = True
        mask[0] = False
        ids_out.append(seq)
        masks.append(mask)
        pieces.append(token_pieces(tokenizer, seq))
        texts.append("".join(pieces[-1]))
        sources.append(dict(p))
    cfg: Any = getattr(model, "config", None)  # None: a vLLM engine
    vocab_size = getattr(cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg, "vocab_size", None)
    info = {"source": source, "generation": settings.to_dict(), "max_length": limit, "padding_side": "left"}
    if prompt_format != "chat":  # recorded when it is not the format of every probe set before issue 45
        info["prompt_format"] = prompt_format
    return ProbeSet(name=name, reference=reference, ids=ids_out, scored=masks, texts=texts, token_text=pieces,
                    sources=sources, settings=info, warnings=warnings, vocab=vocab_strings(tokenizer, vocab_size))
