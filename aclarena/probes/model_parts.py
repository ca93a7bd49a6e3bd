"""The parts of a causal LM that teacher-forced scoring runs: its decoder's final hidden states at the
scored positions (sharded under FSDP2 or whole), its output head (applied chunk by chunk, tied, biased
or a PEFT-wrapped module), its context length, and the check that the head reproduces the model's own
logits. :mod:`aclarena.probes.teacher_forcing` builds the scores on them.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from aclarena.diagnostics.token_drift import (
    compute_dtype,
)
from aclarena.errors import AclarenaError
from aclarena.models.arch import context_length

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class OutputHead:
    """``logits = post(h @ W^T + b)``, applied chunk by chunk into a buffer.

    ``post`` covers the architectures that transform logits after the linear head
    (Gemma-2 soft-capping, Cohere's ``logit_scale``, Granite's ``logits_scaling``); any other
    module is called as it is. :func:`verify_head` checks the result against the model's
    own forward pass.
    """

    weight: torch.Tensor
    bias: torch.Tensor | None = None
    softcap: float | None = None
    scale: float | None = None
    module: Any = None  # a head that is not a plain Linear (e.g. a LoRA-wrapped one)

    @property
    def vocab_size(self) -> int:
        return int(self.weight.shape[0])

    @property
    def dtype(self) -> torch.dtype:
        return self.weight.dtype

    def into(self, h: torch.Tensor, out: torch.Tensor, tmp: torch.Tensor | None) -> None:
        """Write the logits of hidden states ``h`` ``[n, H]`` into ``out`` ``[n, V]`` (compute dtype)."""
        import torch

        if self.module is not None:
            out.copy_(self.module(h))
        elif tmp is None:  # head in the compute dtype: straight into the buffer
            torch.matmul(h, self.weight.t(), out=out)
        else:
            torch.matmul(h, self.weight.t(), out=tmp)
            out.copy_(tmp)
        if self.module is None and self.bias is not None:
            out.add_(self.bias)
        if self.softcap:
            out.div_(self.softcap).tanh_().mul_(self.softcap)
        if self.scale is not None:
            out.mul_(self.scale)


def _unwrap(model: Any) -> Any:
    """The transformers model inside a PEFT wrapper (its LoRA layers stay active)."""
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def output_head(model: Any) -> OutputHead:
    """The output head of a causal LM as an :class:`OutputHead`."""
    import torch

    base = _unwrap(model)
    head = base.get_output_embeddings()
    if head is None:
        raise AclarenaError(f"{type(base).__name__} has no output head (get_output_embeddings() is None); "
                            "score a causal language model")
    cfg = base.config.get_text_config() if hasattr(base.config, "get_text_config") else base.config
    softcap = getattr(cfg, "final_logit_softcapping", None)
    scale = getattr(cfg, "logit_scale", None)
    divide = getattr(cfg, "logits_scaling", None)
    if divide:
        scale = (scale or 1.0) / float(divide)
    # FSDP2's fully_shard swaps a sharded module's class for FSDP<class>(FSDPModule, <class>)
    plain = type(head) is torch.nn.Linear or (type(head).__name__ == "FSDPLinear"
                                              and torch.nn.Linear in type(head).__bases__)
    weight, bias = head.weight, head.bias if plain else None
    if is_dtensor(weight):  # FSDP2: every rank gathers the whole head (a collective: all ranks call it together)
        if not plain:
            raise AclarenaError(f"{type(head).__name__}: an output head that is not a plain Linear cannot be "
                                "scored while its weights are sharded (FSDP); train without the monitor or unshard it")
        weight = weight.detach().full_tensor()
        bias = bias.detach().full_tensor() if bias is not None and is_dtensor(bias) else bias
    return OutputHead(weight=weight, bias=bias, softcap=softcap or None,
                      scale=float(scale) if scale not in (None, 1, 1.0) else None,
                      module=None if plain else head)


def vocab_size(model: Any) -> int:
    """The output head's number of rows (the whole head's, also when FSDP shards it; nothing is gathered)."""
    head = _unwrap(model).get_output_embeddings()
    if head is None:
        raise AclarenaError(f"{type(_unwrap(model)).__name__} has no output head (get_output_embeddings() is None); "
                            "score a causal language model")
    return int(head.weight.shape[0])


def model_device(model: Any) -> Any:
    """Where ``model``'s output head lives on this process (sharded: its local shard's device)."""
    return _unwrap(model).get_output_embeddings().weight.device


def is_dtensor(t: Any) -> bool:
    """A torch DTensor (a parameter sharded by FSDP2's ``fully_shard``), without importing torch.distributed."""
    return type(t).__name__ == "DTensor"


def is_sharded(model: Any) -> bool:
    """Whether ``model``'s parameters are sharded across processes by FSDP2 (``fully_shard``).

    Such a model is scored by every rank together: each runs its share of the batches, every
    forward pass goes through the root module (whose hooks gather the weights of one layer at a
    time) and all ranks make the same number of them (``lockstep``).
    """
    return any(is_dtensor(p) for p in _unwrap(model).parameters())


def _decoder(model: Any) -> Any:
    return _unwrap(model).get_decoder()


def hidden_states(model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor,
            position_ids: torch.Tensor) -> torch.Tensor:
    if is_sharded(model):
        return _hidden_sharded(model, input_ids, attention_mask, position_ids)
    out = _decoder(model)(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                          use_cache=False)
    return out.last_hidden_state if hasattr(out, "last_hidden_state") else out[0]


def _hidden_sharded(model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                    position_ids: torch.Tensor) -> torch.Tensor:
    """The decoder's output, taken from a forward pass of the whole (FSDP2-sharded) model.

    FSDP2 gathers the root module's own weights (the final norm, an untied head) in the root's
    forward hook, so the decoder cannot be called on its own; the head is applied to one
    position only (``logits_to_keep=1``), its result thrown away.
    """
    got: list[Any] = []
    hook = _decoder(model).register_forward_hook(lambda _m, _a, out: got.append(out))
    try:
        try:
            model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=False,
                  logits_to_keep=1)
        except TypeError:
            model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=False)
    finally:
        hook.remove()
    out = got[-1]
    return out.last_hidden_state if hasattr(out, "last_hidden_state") else out[0]


@contextmanager
def no_grad(model: Any) -> Iterator[None]:
    """``torch.inference_mode()``; for a sharded model ``torch.no_grad()`` (FSDP2 gathers weights into
    buffers it keeps, and buffers written in inference mode cannot be written by training afterwards),
    and its weights sharded again at the end (FSDP2 keeps the root module's gathered after a forward
    pass, for the backward pass that scoring never makes)."""
    import torch

    if not is_sharded(model):
        with torch.inference_mode():
            yield
        return
    try:
        with torch.no_grad():
            yield
    finally:
        for m in _unwrap(model).modules():
            if hasattr(m, "reshard") and type(m).__name__.startswith("FSDP"):
                m.reshard()


def model_positions(model: Any) -> int | None:
    """The model's maximum positions (:func:`aclarena.models.arch.context_length`; None when it has no limit)."""
    return context_length(_unwrap(model).config)


_VERIFIED: weakref.WeakKeyDictionary[Any, bool] = weakref.WeakKeyDictionary()


def verify_head(model: Any, head: OutputHead, ids: np.ndarray, name: str = "the model") -> None:
    """Check, on a few tokens, that chunked logits equal the model's own forward logits.

    Done once per model object (an architecture property; a training callback scores the
    same live model many times), on the last of up to 8 tokens.
    """
    import torch

    if _VERIFIED.get(model):
        return
    n = int(min(len(ids), 8))
    if n == 0:
        return
    device = head.weight.device
    x = torch.as_tensor(np.asarray(ids[:n], dtype=np.int64), device=device).view(1, -1)
    mask = torch.ones_like(x)
    pos = torch.arange(n, device=device).view(1, -1)
    with no_grad(model):
        try:  # only the last position's logits: the check then costs one row of the head
            want = model(input_ids=x, attention_mask=mask, position_ids=pos, use_cache=False,
                         logits_to_keep=1).logits[0, -1:].float()
        except TypeError:
            want = model(input_ids=x, attention_mask=mask, position_ids=pos, use_cache=False).logits[0, -1:].float()
        h = hidden_states(model, x, mask, pos)[0, -1:]
        got = torch.empty(1, head.vocab_size, dtype=compute_dtype(head.dtype), device=device)
        tmp = None if compute_dtype(head.dtype) == head.dtype else torch.empty(1, head.vocab_size, dtype=head.dtype,
                                                                                device=device)
        head.into(h, got, tmp)
    if want.shape != got.shape:
        raise AclarenaError(f"{name}: its forward returns {want.shape[-1]} logits but its output head has "
                            f"{head.vocab_size} rows; this architecture is not supported by teacher-forced scoring")
    got = got.float()
    finite = torch.isfinite(want)
    if not torch.equal(finite, torch.isfinite(got)):
        raise AclarenaError(f"{name}: logits computed from its final hidden states are non-finite elsewhere than "
                            "its forward pass's; this architecture is not supported by teacher-forced scoring")
    if not bool(finite.any()):
        return  # nothing finite to compare (NaN weights?): check again next time; the scores flag it
    scale = float(want[finite].abs().max().clamp_min(1.0))
    err = float((want[finite] - got[finite]).abs().max()) / scale
    tol = 1e-4 if head.dtype in (torch.float32, torch.float64) else 3e-2
    if not err <= tol:
        raise AclarenaError(
            f"{name}: logits computed from its final hidden states differ from its forward pass (relative error "
            f"{err:.1e}); this architecture transforms logits in a way aclarena does not reproduce"
        )
    _VERIFIED[model] = True
