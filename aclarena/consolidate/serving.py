"""Serving MLE: one frozen backbone, one LoRA expert per domain, the expert set per request.

* :class:`PeftExpertServer` (CPU or one GPU): every expert is loaded once on the backbone with
  peft (``load_adapter``); each request is routed from its execution context and served
  with ``set_adapter(expert)``, or with ``disable_adapter()`` (the bare backbone) when the
  router finds no expert and the fallback policy is ``backbone``.
* :class:`VllmExpertServer` (GPUs, the optional ``gpu`` extra): vLLM multi-LoRA, one
  ``LoRARequest`` per request. Imported only when used; not exercised by the CPU test suite.

:func:`expert_parameters` counts the parameters each expert adds; ``benchmarks/mle_serving.py``
measures the latency each adds per generated token against the bare backbone.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aclarena.consolidate.contexts import Context
from aclarena.consolidate.routers import FALLBACKS, Route, Router, apply_fallback
from aclarena.errors import AclarenaError, unknown_name


def expert_parameters(folder: str | os.PathLike[str]) -> int:
    """Parameters a LoRA adapter folder adds (the entries of its safetensors file)."""
    from aclarena.models.files import read_safetensors_header

    path = Path(folder) / "adapter_model.safetensors"
    if not path.is_file():
        raise AclarenaError(f"{folder} has no adapter_model.safetensors; point at a LoRA adapter folder")
    total = 0
    for name, meta in read_safetensors_header(path).items():
        if name == "__metadata__":
            continue
        n = 1
        for d in meta["shape"]:
            n *= int(d)
        total += n
    return total


def adapter_settings(folder: str | os.PathLike[str]) -> dict[str, Any]:
    """Rank, alpha and target modules of a LoRA adapter folder (its config checked for its shape)."""
    from aclarena.models.adapter_files import read_adapter_config

    cfg = read_adapter_config(folder)
    targets = cfg.get("target_modules")
    return {"r": cfg.get("r"), "lora_alpha": cfg.get("lora_alpha"),
            "target_modules": sorted(targets) if isinstance(targets, list) else targets}


def check_experts(experts: Mapping[str, str | os.PathLike[str]], base: str | os.PathLike[str] | None) -> None:
    """Check every expert adapter before peft or vLLM reads it (one line naming the expert).

    Its adapter_config.json's shape and fields against its weights and against ``base`` (the
    backbone's folder or hub id, when known), and its weights' values: an expert with NaN or
    infinite entries would serve text that looks real.
    """
    from aclarena.models.adapter_files import check_adapter_folder
    from aclarena.models.tensors import check_finite_safetensors

    for name, folder in experts.items():
        try:
            check_adapter_folder(folder, base=base)
            weights = Path(folder) / "adapter_model.safetensors"
            if weights.is_file():
                check_finite_safetensors([weights], name)
        except AclarenaError as e:
            msg = str(e)
            raise type(e)(msg if repr(name) in msg else f"expert {name!r}: {msg}") from None


@dataclass(frozen=True)
class Served:
    """One served request: the text, the route, and the adapter used (None = the backbone)."""

    text: str
    route: Route
    adapter: str | None


class PeftExpertServer:
    """A backbone with every expert loaded; ``generate`` routes each request and sets its adapter."""

    def __init__(self, backbone: Any, tokenizer: Any, experts: Mapping[str, str | os.PathLike[str]], router: Router,
                 *, fallback: str = "backbone") -> None:
        from peft import PeftModel

        from aclarena.models.loading import library_errors

        if not experts:
            raise AclarenaError("no experts to serve; name at least one adapter folder")
        if fallback not in FALLBACKS:
            raise unknown_name("fallback policy", fallback, FALLBACKS)
        unknown = set(router.experts) - set(experts)
        if unknown:
            raise AclarenaError(f"the router can choose {', '.join(sorted(unknown))}, which has no adapter; "
                                "load an adapter for every expert the router knows")
        check_experts(experts, getattr(backbone, "name_or_path", None) or None)
        names = list(experts)
        with library_errors(f"the experts cannot be applied on the backbone ({', '.join(names)})"):
            self.model = PeftModel.from_pretrained(backbone, str(experts[names[0]]), adapter_name=names[0])
            for name in names[1:]:
                self.model.load_adapter(str(experts[name]), adapter_name=name)
        self.model.eval()
        self.tokenizer = tokenizer
        self.router = router
        self.fallback = fallback
        self.experts = dict(experts)

    def parameters(self) -> dict[str, int]:
        """Parameters per expert, and ``backbone`` for the frozen weights they share."""
        out = {name: expert_parameters(folder) for name, folder in self.experts.items()}
        base = self.model.get_base_model()
        out["backbone"] = sum(p.numel() for n, p in base.named_parameters() if "lora_" not in n)
        return out

    def choose(self, ctx: Context) -> tuple[Route, str | None]:
        route = self.router.route(ctx)
        return route, apply_fallback(route, self.fallback)

    def generate(self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None = None,
                 **generate_kwargs: Any) -> Served:
        """Route by the chat's system prompt and tools, then generate one assistant turn."""
        import torch

        route, adapter = self.choose(Context.from_messages(list(messages), list(tools) if tools else None))
        enc = self.tokenizer.apply_chat_template(list(messages), tools=list(tools) if tools else None,
                                                 add_generation_prompt=True, return_tensors="pt", return_dict=True)
        from aclarena.models.chat import stop_token_ids

        kwargs = {"max_new_tokens": 64, "do_sample": False, "pad_token_id": self.tokenizer.pad_token_id,
                  "eos_token_id": stop_token_ids(self.model, self.tokenizer, required=False) or None}
        kwargs |= generate_kwargs
        with torch.no_grad():
            if adapter is None:
                with self.model.disable_adapter():
                    out = self.model.generate(**enc, **kwargs)
            else:
                self.model.set_adapter(adapter)
                out = self.model.generate(**enc, **kwargs)
        text = self.tokenizer.decode(out[0, enc["input_ids"].shape[1]:], skip_special_tokens=True)
        return Served(text, route, adapter)


class VllmExpertServer:
    """vLLM multi-LoRA serving (GPU, ``pip install -c constraints-gpu.txt -e .[gpu]``).

    The backbone is loaded once with ``enable_lora=True``; each request carries the
    ``LoRARequest`` of its routed expert (none for the backbone fallback). Not tested on the
    CPU suite; docs/consolidation.md shows the use.
    """

    def __init__(self, backbone_path: str | os.PathLike[str], experts: Mapping[str, str | os.PathLike[str]],
                 router: Router, *, fallback: str = "backbone", **llm_kwargs: Any) -> None:
        try:
            from vllm import LLM
            from vllm.lora.request import LoRARequest
        except ImportError:
            raise AclarenaError("vLLM is not installed; install the GPU extra (pip install -c constraints-gpu.txt "
                                "-e .[gpu]) on a machine with a GPU, or serve with PeftExpertServer") from None
        if fallback not in FALLBACKS:
            raise unknown_name("fallback policy", fallback, FALLBACKS)
        # vLLM reads the weights itself: check the experts and a local backbone on disk first
        check_experts(experts, backbone_path)
        if Path(backbone_path).is_dir():
            from aclarena.models.files import safetensors_files
            from aclarena.models.tensors import check_finite_safetensors

            check_finite_safetensors(safetensors_files(Path(backbone_path)), str(backbone_path))
        ranks = [adapter_settings(f)["r"] or 8 for f in experts.values()]
        kwargs = {"enable_lora": True, "max_loras": len(experts), "max_lora_rank": max(ranks)} | llm_kwargs
        self.llm = LLM(model=str(backbone_path), **kwargs)
        self.requests = {name: LoRARequest(name, i + 1, str(folder)) for i, (name, folder) in enumerate(experts.items())}
        self.router = router
        self.fallback = fallback

    def generate(self, chats: Sequence[tuple[Sequence[Mapping[str, Any]], Sequence[Mapping[str, Any]] | None]],
                 sampling_params: Any = None) -> list[Served]:
        """Route each chat and generate its reply; one LoRARequest per request."""
        from vllm import SamplingParams

        from aclarena.models.chat import stop_token_ids

        # the one stop rule (eos ids and the template's end of turn), as every other generation path
        params = sampling_params or SamplingParams(temperature=0.0, max_tokens=256, stop_token_ids=stop_token_ids(
            self.llm, self.llm.get_tokenizer(), required=False))
        out = []
        for messages, tools in chats:
            route = self.router.route(Context.from_messages(list(messages), list(tools) if tools else None))
            adapter = apply_fallback(route, self.fallback)
            req = self.requests.get(adapter) if adapter is not None else None
            res = self.llm.chat([list(messages)], params, tools=list(tools) if tools else None, lora_request=req,
                                use_tqdm=False)
            out.append(Served(res[0].outputs[0].text, route, adapter))
        return out
