"""vLLM generation for ``probe`` and ``eval`` on GPU machines (``--engine vllm``, the ``gpu`` extra).

vLLM is imported only here and only when asked for; without it ``--engine vllm`` fails with
one line saying how to install it. A vLLM engine plays the same role as a transformers
model in :mod:`aclarena.envs.rollout`: :func:`vllm_policy` answers a batch of
conversations, so every environment, reward and store format stays as it is.

Status: written against vLLM's stable offline API (``LLM.generate`` with token-id prompts
and ``SamplingParams``); no vLLM was installed where it was written, so the generation path
itself has not been run (docs/gpu.md). Greedy decoding gives the same tokens as
transformers up to kernel numerics; sampled decoding draws other samples than transformers
for the same seed.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from aclarena.errors import AclarenaError

if TYPE_CHECKING:
    from aclarena.models.chat import Conversation, Policy
    from aclarena.models.loading import LoadOptions
    from aclarena.store.manifest import Manifest

INSTALL_HINT = ("install it on the GPU machine with `pip install -c constraints-gpu.txt -e .[gpu]` "
                "(docs/gpu.md), or use --engine hf")


def require_vllm() -> Any:
    """The vllm module, or one line saying how to get it."""
    try:
        import vllm
    except ImportError:
        raise AclarenaError(f"--engine vllm needs vLLM, which is not installed; {INSTALL_HINT}") from None
    return vllm


def is_vllm(model: Any) -> bool:
    """Whether ``model`` is a vLLM engine (duck-typed: vLLM is never imported to check)."""
    return type(model).__module__.startswith("vllm") and hasattr(model, "generate")


def load_llm(name: str, manifest: Manifest, run_dir: str | os.PathLike[str], options: LoadOptions,
             *, seed: int = 0) -> Any:
    """A vLLM engine for a manifest checkpoint (full checkpoints; merge LoRA adapters first).

    Weights with NaN or infinite entries are refused before vLLM sees them
    (:func:`aclarena.models.tensors.check_finite_checkpoint`), as :func:`load_model` refuses them.
    """
    from aclarena.models.checkpoint import inspect

    vllm = require_vllm()
    spec = manifest.resolve(name)
    info = inspect(spec, manifest, run_dir, allow_pickle=options.allow_pickle)
    info.require_loadable()
    if info.source == "adapter":
        raise AclarenaError(f"checkpoint {name!r} is a LoRA adapter; --engine vllm takes full checkpoints: merge it "
                            "(peft merge_and_unload) into a folder and add that, or use --engine hf")
    # vLLM reads the weights itself, past load_model's check: check them on disk before it does
    from aclarena.models.tensors import check_finite_checkpoint

    check_finite_checkpoint(info)
    dtype = {"auto": "auto", "float32": "float32", "bfloat16": "bfloat16", "float16": "float16"}[options.dtype]
    try:
        return vllm.LLM(model=str(info.location), dtype=dtype, seed=seed,
                        trust_remote_code=options.trust_remote_code,
                        load_format="auto" if options.allow_pickle else "safetensors",
                        tensor_parallel_size=int(os.environ.get("ACLARENA_VLLM_TP", "1")))
    except (OSError, ValueError, RuntimeError) as e:
        text = str(e).strip().splitlines()
        raise AclarenaError(f"vLLM cannot load {name!r} from {info.location}: {text[0] if text else e}") from None


def sampling_params(*, max_new_tokens: int, do_sample: bool, temperature: float, top_p: float, seed: int | None,
                    stop_token_ids: Sequence[int]) -> Any:
    vllm = require_vllm()
    return vllm.SamplingParams(max_tokens=max_new_tokens, temperature=float(temperature) if do_sample else 0.0,
                               top_p=float(top_p) if do_sample else 1.0, seed=seed if do_sample else None,
                               stop_token_ids=list(stop_token_ids), skip_special_tokens=False)


def generate_ids(llm: Any, prompts: Sequence[Sequence[int]], params: Any) -> list[list[int]]:
    """The generated token ids of each prompt (token-id prompts: no second tokenization)."""
    outs = llm.generate([{"prompt_token_ids": list(p)} for p in prompts], params, use_tqdm=False)
    return [list(o.outputs[0].token_ids) for o in outs]


def vllm_policy(llm: Any, tokenizer: Any, *, max_new_tokens: int = 64, do_sample: bool = False,
                temperature: float = 1.0, top_p: float = 1.0, seed: int = 0,
                max_context: int | None = None, prompt_format: str = "chat") -> Policy:
    """A rollout policy answering with ``llm`` (see :func:`aclarena.envs.rollout.model_policy`)."""
    from aclarena.models.chat import cut_reply, render_prompt, stop_token_ids

    limit = int(llm.llm_engine.model_config.max_model_len) if max_context is None else max_context
    stops = stop_token_ids(llm, tokenizer)
    calls = [0]

    def policy(convs: Sequence[Conversation]) -> list[str | None]:
        texts = [render_prompt(tokenizer, m, t, prompt_format=prompt_format) for m, t in convs]
        ids = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]
        keep = [i for i, x in enumerate(ids) if len(x) + max_new_tokens <= limit]
        out: list[str | None] = [None] * len(convs)
        if keep:
            calls[0] += 1  # a fresh seed per call, derived from the policy's seed
            params = sampling_params(max_new_tokens=max_new_tokens, do_sample=do_sample, temperature=temperature,
                                     top_p=top_p, seed=seed * 1_000_003 + calls[0], stop_token_ids=stops)
            for i, toks in zip(keep, generate_ids(llm, [ids[i] for i in keep], params), strict=True):
                cut = next((j for j, t in enumerate(toks) if t in set(stops)), len(toks))
                out[i] = cut_reply(tokenizer, toks[:cut], prompt_format)[1]
        return out

    return policy
