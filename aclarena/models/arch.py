"""Facts about a model's architecture read from its config, one rule each.

:func:`context_length` is the one rule for how many positions a model takes; every place that bounds
a sequence by the model (probe generation, teacher-forced scoring, arena rollouts, SFT's
``max_length``, MLE's experts, the curriculum's RL data) calls it. No torch, no transformers: a config
object or the dict of a ``config.json`` is read as it is.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: the config fields that name a model's context length, in the order they are read: Llama, Qwen, Mistral,
#: Gemma and most families (``max_position_embeddings``); GPT-2 / GPT-J (``n_positions``); a few remote-code
#: configs (``max_sequence_length``, ``seq_length``); MPT (``max_seq_len``)
CONTEXT_KEYS = ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length", "max_seq_len")


def _text_config(config: Any) -> Any:
    """The language model's part of a multimodal config (its ``text_config``), else the config itself."""
    if isinstance(config, Mapping):
        sub = config.get("text_config")
        return sub if isinstance(sub, Mapping) else config
    return config.get_text_config() if hasattr(config, "get_text_config") else config


def context_length(config: Any) -> int | None:
    """A model's context length: the most positions it takes in one sequence, or None when its config sets none.

    The rule: in the text part of the config (``get_text_config()`` of a multimodal config, the
    ``text_config`` table of a ``config.json`` dict), the first of :data:`CONTEXT_KEYS` whose value is a
    positive integer (``true``, a float or a string is no length and is skipped). A sliding window
    (Mistral, Gemma 2/3's ``sliding_window``) is not a context length: it limits how far each position
    attends, not how many positions there are. Models with relative or ALiBi positions and no such field
    (T5, BLOOM) have none: None. What a caller does without a length (no bound, a default) and any cap
    of its own stay at the call site.

    Args:
        config: a transformers ``PretrainedConfig`` (``model.config``) or the dict of a ``config.json``.
    """
    cfg = _text_config(config)
    for key in CONTEXT_KEYS:
        value = cfg.get(key) if isinstance(cfg, Mapping) else getattr(cfg, key, None)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None
