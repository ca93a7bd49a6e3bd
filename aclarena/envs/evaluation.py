"""Scoring a model on an arena suite: greedy and avg@k over seeds, with per-item outcomes.

For each seed the suite's ``n`` evaluation tasks are drawn with that seed (the same tasks
for every checkpoint, so per-item outcomes line up across the chain); each task is played
once greedily and ``samples`` times with sampling (the study's avg@16 is ``samples=16``).
The cell's score is the mean over seeds of the greedy accuracy, with its standard
deviation over seeds.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from aclarena.envs import ARENA_VERSION, parse_suite, sample_tasks
from aclarena.envs.base import Trajectory
from aclarena.envs.rollout import generate_trajectories
from aclarena.errors import ConfigError
from aclarena.results.capability import CellData, cell_payload

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

    from aclarena.distributed import World


@dataclass(frozen=True)
class EvalSettings:
    """How a suite is scored. Every field but ``batch_size`` is part of the cell's identity."""

    n: int = 100
    seeds: tuple[int, ...] = (0,)
    samples: int = 4
    temperature: float = 1.0
    top_p: float = 1.0
    batch_size: int = 32

    def __post_init__(self) -> None:
        if not isinstance(self.n, int) or self.n < 1:
            raise ConfigError(f"-n must be a positive number of tasks, got {self.n!r}")
        if not self.seeds or len(set(self.seeds)) != len(self.seeds):
            raise ConfigError(f"--seeds must be distinct integers, got {list(self.seeds)!r}")
        if not isinstance(self.samples, int) or self.samples < 0:
            raise ConfigError(f"--samples must be >= 0 (0: greedy only), got {self.samples!r}")
        if not self.temperature > 0:
            raise ConfigError(f"--temperature must be > 0, got {self.temperature!r}")
        if not 0 < self.top_p <= 1:
            raise ConfigError(f"--top-p must be in (0, 1], got {self.top_p!r}")
        if self.batch_size < 1:
            raise ConfigError(f"--batch-size must be >= 1, got {self.batch_size!r}")

    def identity(self) -> dict[str, Any]:
        """The settings that decide the outcome (stored with the cell; its key is their hash)."""
        d = asdict(self)
        d.pop("batch_size")
        d["seeds"] = list(self.seeds)
        d["split"] = "eval"
        d["arena_version"] = ARENA_VERSION
        if self.samples == 0:
            d.pop("temperature")
            d.pop("top_p")
        return d


def suite_domain_role(suite: str) -> tuple[str, str]:
    """The (domain, role) a suite's cells are tagged with; a custom suite's come from its manifest entry."""
    from aclarena.envs.custom import custom_suite

    custom = custom_suite(suite)
    if custom is not None:
        return custom.spec.domain, custom.spec.role
    env, variant = parse_suite(suite)
    return env, ("general" if env == "general" else variant)


def suite_settings(identity: dict[str, Any], suite: str) -> dict[str, Any]:
    """A suite's cell settings: the eval settings, and for a custom suite its spec and file hash
    (an edited task file or scorer makes new cells instead of reusing the old ones)."""
    from aclarena.envs.custom import identity as custom_identity

    extra = custom_identity(suite)
    return identity if extra is None else {**identity, **extra}


def format_settings(settings: dict[str, Any], prompt_format: str) -> dict[str, Any]:
    """A cell's settings with its prompt format: ``plain`` is recorded (and so changes the cell's id);
    ``chat``, the format of every cell before issue 45, is not, so those cells keep their ids."""
    return settings if prompt_format == "chat" else {**settings, "prompt_format": prompt_format}


def transcript(traj: Trajectory) -> str:
    """The generated part of a trajectory as compact text (after the task's opening messages: a system
    prompt and a user message for the arena's tasks, a custom suite's own chat for its tasks)."""
    lines = []
    for m in traj.messages[len(traj.task.messages):]:
        lines.append(f"[{m['role']}] {m.get('content') or ''}")
    return "\n".join(lines)


def _outcome(tr: Trajectory) -> tuple[float, dict[str, float], str, str]:
    return tr.reward, {k: v for k, v in tr.metrics.items() if k != "reward"}, transcript(tr), tr.end_reason


def evaluate_suite(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    suite: str,
    settings: EvalSettings,
    *,
    checkpoint: str,
    on_progress: Callable[[int], None] | None = None,
    world: World | None = None,
    prompt_format: str = "chat",
) -> CellData | None:
    """Play ``suite`` with ``model``; returns the cell (:func:`aclarena.results.capability.write_cells` stores it).

    Prompts are rendered in ``prompt_format`` (:func:`aclarena.models.chat.render_prompt`); a ``plain``
    cell's settings say so (:func:`format_settings`), so it is never taken for a chat cell.

    With a data-parallel ``world`` (:mod:`aclarena.distributed`) each rank plays its
    round-robin share of the generation batches (the same batches, seeded the same way, as
    one process); rank 0 gets the cell and the other ranks None.
    """
    domain, role = suite_domain_role(suite)
    drawn = {seed: sample_tasks(suite, settings.n, seed=seed, split="eval") for seed in settings.seeds}
    # a custom suite's file may hold fewer tasks than -n: then every one of them is played
    n_seeds, n, k = len(settings.seeds), len(drawn[settings.seeds[0]]), settings.samples
    shard = (world.rank, world.size) if world is not None and world.distributed else None

    def play() -> list[tuple[dict[int, Any], dict[int, float]]]:
        per_seed = []
        for seed in settings.seeds:
            tasks = drawn[seed]
            trajs = generate_trajectories(model, tokenizer, tasks, do_sample=False, seed=seed,
                                          batch_size=settings.batch_size, on_batch=on_progress, shard=shard,
                                          prompt_format=prompt_format)
            greedy_out = {i: _outcome(tr) for i, tr in enumerate(trajs) if tr is not None}
            sampled_out: dict[int, float] = {}
            if k:
                repeated = [t for t in tasks for _ in range(k)]
                trajs = generate_trajectories(model, tokenizer, repeated, do_sample=True,
                                              temperature=settings.temperature, top_p=settings.top_p, seed=seed,
                                              batch_size=settings.batch_size, on_batch=on_progress, shard=shard,
                                              prompt_format=prompt_format)
                sampled_out = {i: tr.reward for i, tr in enumerate(trajs) if tr is not None}
            per_seed.append((greedy_out, sampled_out))
        return per_seed

    parts = [play()] if world is None else world.gather(world.each(play))
    if parts is None:  # a rank other than the main one
        return None
    greedy = np.zeros((n_seeds, n), dtype=np.float32)
    sampled = np.zeros((n_seeds, n, k), dtype=np.float32) if k else None
    ids: list[str] = []
    transcripts: list[str] = []
    reasons: list[str] = []
    metric_rows: dict[str, np.ndarray] = {}
    for si, seed in enumerate(settings.seeds):
        ids.extend(t.id for t in drawn[seed])
        outcomes: dict[int, Any] = {}
        rewards: dict[int, float] = {}
        for part in parts:
            outcomes.update(part[si][0])
            rewards.update(part[si][1])
        for i in range(n):
            reward, metrics, text, reason = outcomes[i]
            greedy[si, i] = reward
            transcripts.append(text)
            reasons.append(reason)
            for name, v in metrics.items():
                metric_rows.setdefault(name, np.full((n_seeds, n), np.nan, dtype=np.float32))[si, i] = v
        if k and sampled is not None:
            sampled[si] = np.array([rewards[j] for j in range(n * k)], dtype=np.float32).reshape(n, k)
    return cell_payload(checkpoint=checkpoint, suite=suite, domain=domain, role=role, source="arena",
                        settings=format_settings(suite_settings(settings.identity(), suite), prompt_format), greedy=greedy, samples=sampled, item_ids=ids,
                        metrics=metric_rows, transcripts=transcripts, end_reasons=reasons)


def rollouts_per_suite(settings: EvalSettings) -> int:
    """Episodes one suite costs (for progress bars)."""
    return settings.n * len(settings.seeds) * (1 + settings.samples)
