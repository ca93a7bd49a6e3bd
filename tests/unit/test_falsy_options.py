"""Options whose valid value is falsy (0, an empty list) are used or refused, never replaced by a default (issue 15)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from aclarena.consolidate.options import MLEOptions
from aclarena.diagnostics.token_drift import Workspace
from aclarena.envs import get_env
from aclarena.envs.rollout import Episode, context_limit
from aclarena.errors import AclarenaError


def test_lora_zero_rank_and_alpha_are_refused_not_defaulted():
    assert MLEOptions().lora()["r"] == 8 and MLEOptions().lora()["lora_alpha"] == 16
    assert MLEOptions(lora_r=2, lora_alpha=1).lora()["lora_alpha"] == 1
    with pytest.raises(AclarenaError, match="--lora-r must be at least 1, got 0"):
        MLEOptions(lora_r=0)
    with pytest.raises(AclarenaError, match="--lora-alpha must be at least 1, got 0"):
        MLEOptions(lora_alpha=0)


def test_empty_router_list_is_refused():
    with pytest.raises(AclarenaError, match="--routers is empty"):
        MLEOptions(routers=())
    assert list(MLEOptions().routers) == ["rule", "learned", "bandit"]


def test_zero_turns_and_context_are_refused():
    env = get_env("search")
    task = env.generate(1, seed=0, split="eval")[0]
    assert Episode(env, task).max_turns == env.max_turns
    assert Episode(env, task, max_turns=1).max_turns == 1
    with pytest.raises(ValueError, match="max_turns"):
        Episode(env, task, max_turns=0)
    model = SimpleNamespace(config=SimpleNamespace(max_position_embeddings=512))
    assert context_limit(model) == 512 and context_limit(model, 7) == 7
    with pytest.raises(ValueError, match="max_context"):
        context_limit(model, 0)


def test_workspace_sub_rows_zero_is_refused():
    assert Workspace(4, 10, sub_rows=3).sub_rows == 3
    with pytest.raises(ValueError, match="sub_rows"):
        Workspace(4, 10, sub_rows=0)
