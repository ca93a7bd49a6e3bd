"""A constructed flip with a known answer: E, and L equal to E except at chosen decisions.

``PrefixEnv`` is a one-turn environment whose task is solved when the reply starts with a
target text; the target is E's own greedy reply up to and including a *critical* position
``p``, so that only the decisions up to ``p`` matter. L is E with its (untied) output head
changed so that, on E's trajectories, L's top-1 differs from E's token exactly at ``p``
(critical: L fails the item) and at ``m`` later positions (harmless: the reply still starts
with the target). Each change is a rank-one edit of one head row along a direction that is
orthogonal to the final hidden states of every other position of E's trajectories, so
nothing else moves.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np

from aclarena.envs.base import Environment, Task, Trajectory


class PrefixEnv(Environment):
    name = "prefix"
    variants = ("id",)
    max_turns = 1
    max_new_tokens = 20

    def system_prompt(self, variant: str) -> str:
        return "reply"

    def _candidate(self, rng: Any, variant: str) -> tuple[str, str, dict[str, Any]]:
        raise NotImplementedError("tasks are made by hand in the tests")

    def score(self, task: Task, trajectory: Trajectory) -> dict[str, float]:
        text = trajectory.steps[0].text if trajectory.steps else ""
        return {"reward": float(text.startswith(task.data["target"]))}

    def expert_actions(self, task: Task) -> list[str]:
        return [task.data["target"]]


PROMPTS = ["what is the total of the order", "search the capital city of the river",
           "please cancel my order and confirm", "which tower is the first"]


def tasks(targets: list[str] | None = None, prompts: list[str] = PROMPTS) -> list[Task]:
    return [Task(id=f"prefix/id/{i}", env="prefix", variant="id", split="eval", system="reply", tools=None,
                 prompt=p, key=str(i), data={"target": (targets or [""] * len(prompts))[i]})
            for i, p in enumerate(prompts)]


def e_model(tokenizer: Any, seed: int = 7, hidden_size: int = 128) -> Any:
    import torch

    from aclarena.models.tiny import build_model, tiny_config

    model = build_model(tiny_config(tokenizer, tie_word_embeddings=False, hidden_size=hidden_size), seed=seed)
    with torch.no_grad():
        model.lm_head.weight.mul_(60.0)
    return model.eval()


def greedy(model: Any, tokenizer: Any, ts: list[Task]) -> list[tuple[list[int], list[int]]]:
    """(context ids, generated ids) of each task, E generating alone."""
    from aclarena.analysis.flips import play
    from aclarena.probes.lockstep import Swapper

    env = PrefixEnv()
    sw = [Swapper() for _ in ts]
    play(ts, sw, model, model, tokenizer, driver="e", env_for=lambda t: env)
    out = []
    for t, s in zip(ts, sw, strict=True):
        text = tokenizer.apply_chat_template(t.messages, add_generation_prompt=True, tokenize=False)
        out.append((tokenizer(text, add_special_tokens=False)["input_ids"], list(s.tokens)))
    return out


def construct(tokenizer: Any, *, critical: int = 5, harmless: tuple[int, ...] = (9, 12, 15, 18),
              prompts: list[str] = PROMPTS, hidden_size: int = 128) -> dict[str, Any]:
    """E, L, the tasks (targets set) and, per task, the critical position and L's token there."""
    import torch

    e = e_model(tokenizer, hidden_size=hidden_size)
    ts = tasks(prompts=prompts)
    runs = greedy(e, tokenizer, ts)
    hidden, where = [], []
    with torch.no_grad():
        for i, (ctx, gen) in enumerate(runs):
            ids = torch.tensor([ctx + gen])
            h = e.model(input_ids=ids).last_hidden_state[0]
            for t in range(len(gen)):
                hidden.append(h[len(ctx) + t - 1].double())
                where.append((i, t))
    H = torch.stack(hidden)  # positions x hidden
    assert H.shape[0] < H.shape[1], "more positions than hidden dimensions: no exact construction"
    W = e.lm_head.weight.detach().double()
    l_model = copy.deepcopy(e)
    targets, crit_tok = [], []
    edits = torch.zeros_like(W)
    kept: list[int] = []

    def clean(tid: int) -> bool:
        text = tokenizer.decode([tid])
        return bool(text) and text.isascii() and text.isprintable()

    for i, (_, gen) in enumerate(runs):
        full = tokenizer.decode(gen)
        # the critical position: the first from `critical` on whose token is clean text and ends a clean prefix
        p = next((t for t in [*range(critical, min(harmless)), *range(1, critical)] if clean(gen[t])
                  and full.startswith(tokenizer.decode(gen[:t + 1]))), None)
        if p is None:  # E's reply has no clean token before the harmless positions: leave the item out
            continue
        kept.append(i)
        targets.append(tokenizer.decode(gen[:p + 1]))
        for t, boost in [(p, 30.0)] + [(q, 8.0) for q in harmless]:
            row = where.index((i, t))
            logits = H[row] @ W.T
            order = torch.argsort(logits, descending=True).tolist()
            alt = next(v for v in order if v != gen[t] and clean(v)
                       and tokenizer.decode([v]) != tokenizer.decode([gen[t]]))
            if t == p:
                crit_tok.append((p, alt))
            # u . h_row = 1 and u . h_other = 0 for every other position (minimum-norm solution)
            rhs = torch.zeros(H.shape[0], dtype=torch.float64)
            rhs[row] = 1.0
            u = torch.linalg.pinv(H) @ rhs
            margin = float(logits[gen[t]] - logits[alt])
            edits[alt] += (margin + boost) * u
    with torch.no_grad():
        l_model.lm_head.weight.add_(edits.to(l_model.lm_head.weight.dtype))
    ts = tasks(targets, [prompts[i] for i in kept])
    return {"e": e, "l": l_model.eval(), "tasks": ts, "critical": crit_tok, "runs": [runs[i] for i in kept],
            "harmless": [h for h in harmless], "env": PrefixEnv()}


def disagreements(model_e: Any, model_l: Any, runs: list[tuple[list[int], list[int]]]) -> list[np.ndarray]:
    """Positions of E's trajectories where L's top-1 differs from E's token (a check of the construction)."""
    import torch

    out = []
    with torch.no_grad():
        for ctx, gen in runs:
            ids = torch.tensor([ctx + gen])
            top = model_l(input_ids=ids).logits[0, len(ctx) - 1:len(ctx) + len(gen) - 1].argmax(-1).numpy()
            out.append(np.flatnonzero(top != np.asarray(gen)))
    return out


def hand_made_result(early: str = "seq-math", late: str = "seq-search", suite: str = "math/id") -> Any:
    """A flips result with known values and no model behind it (for the page and the figures)."""
    from aclarena.analysis.flips import FlipItem, FlipsResult, SwapCurve
    from aclarena.diagnostics.flips import chance_share

    items = [
        FlipItem(item_id="math/id/aaa", direction="forgot", reproduced=True, e_reward=1.0, l_reward=0.0, n_positions=6,
                 diverge=3, below=3, e_token=" 42", l_token=" 41", e_entropy=1.25, entropy_pct=100.0, kl=3.5,
                 in_top=True, chance=1 / 6, e_topk=[(" 42", 0.6), (" 41", 0.3)], l_topk=[(" 41", 0.9), (" 42", 0.05)]),
        FlipItem(item_id="math/id/bbb", direction="forgot", reproduced=True, e_reward=1.0, l_reward=0.0, n_positions=5,
                 diverge=1, below=1, e_token="Answer", l_token="So", e_entropy=0.5, entropy_pct=60.0, kl=2.0,
                 in_top=False, chance=1 / 5, e_topk=[("Answer", 0.7)], l_topk=[("So", 0.8)]),
        FlipItem(item_id="math/id/ccc", direction="gained", reproduced=True, e_reward=0.0, l_reward=1.0, n_positions=4,
                 diverge=0, below=-1, e_token="I", l_token="Answer", e_entropy=0.9, entropy_pct=100.0, kl=1.0,
                 in_top=True, chance=1 / 4, e_topk=[("I", 0.5)], l_topk=[("Answer", 0.6)]),
    ]
    traj = {"math/id/aaa": {"e": ["Answer", ":", " the", " 42", "<|im_end|>", ""],
                            "l": ["Answer", ":", " the", " 41", "<|im_end|>"]},
            "math/id/bbb": {"e": ["Step", "Answer", ":", " 7", "<|im_end|>"], "l": ["Step", "So", " 8", "<|im_end|>"]},
            "math/id/ccc": {"e": ["I", " think", " 3", "<|im_end|>"], "l": ["Answer", ":", " 3", "<|im_end|>"]}}
    budgets = [1.0, 10.0, 50.0]
    fwd = SwapCurve("forward", budgets, ["math/id/aaa", "math/id/bbb"], kl=np.array([[1, 1, 1], [0, 1, 1]], np.int8),
                    random=np.array([[0, 0, 1], [0, 0, 1]], np.int8), swaps_kl=np.array([[1, 1, 2], [1, 1, 2]], np.int32),
                    swaps_random=np.array([[1, 1, 2], [1, 1, 2]], np.int32))
    rev = SwapCurve("reverse", budgets, ["math/id/aaa", "math/id/bbb"], kl=np.array([[1, 1, 1], [1, 1, 1]], np.int8),
                    random=np.array([[0, 1, 1], [0, 0, 1]], np.int8), swaps_kl=np.array([[1, 1, 2], [1, 1, 2]], np.int32),
                    swaps_random=np.array([[1, 1, 2], [1, 1, 2]], np.int32))
    chance = {"forgot": chance_share(np.array([True, False]), np.array([1 / 6, 1 / 5])),
              "gained": chance_share(np.array([True]), np.array([1 / 4]))}
    settings = {"budgets": budgets, "top": 0.06, "logprob_below": -2.3, "topk": 5, "seed": 0, "max_items": None,
                "swap": True, "reverse": True}
    return FlipsResult(early=early, late=late, suite=suite, relation=f"{late} descends from {early}", n_items=10,
                       items=items, chance=chance, forward=fwd, reverse=rev, settings=settings,
                       cost={"total_s": 1.0, "per_item_s": 0.33}, trajectories=traj)


def write_result(run: Any, res: Any) -> str:
    from aclarena.results.flips import write_flips

    return write_flips(run, res.payload())


# per-item outcomes of math/id for the fixture run: seq-math solves items 0-1, seq-search 1-2 (one forgotten,
# one gained); oracle-math equals seq-math (nothing flipped)
CELL_SETTINGS = {"n": 4, "seeds": [0], "samples": 0, "split": "eval", "arena_version": "1"}
OUTCOMES = {"seq-math": [1, 1, 0, 0], "seq-search": [0, 1, 1, 0], "oracle-math": [1, 1, 0, 0], "base": [0, 0, 0, 0]}


def write_cells(run: Any, outcomes: dict[str, list[int]] = OUTCOMES, suite: str = "math/id", source: str = "arena",
                per_item: bool = True) -> None:
    """Capability cells of ``suite`` for the fixture run, with per-item outcomes unless ``per_item=False``."""
    from aclarena.envs import sample_tasks
    from aclarena.results import capability
    from aclarena.results.capability import cell_payload

    ids = [t.id for t in sample_tasks(suite, 4, seed=0)]
    items = []
    for ck, o in outcomes.items():
        greedy = np.array([o], dtype=float)
        if per_item:
            items.append(cell_payload(checkpoint=ck, suite=suite, domain="math", role="id", source=source,
                                      settings=CELL_SETTINGS, greedy=greedy, item_ids=ids))
        else:
            items.append(cell_payload(checkpoint=ck, suite=suite, domain="math", role="id", source=source,
                                      settings=CELL_SETTINGS, mean=float(np.mean(o)), std=0.0))
    capability.write_cells(run, items)
