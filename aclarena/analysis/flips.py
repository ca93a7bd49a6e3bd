"""Why an item was forgotten: locate the decision that flipped it, and test it by swapping tokens.

From the per-item outcomes of the capability matrix, the items an earlier checkpoint E solved
and a later one L fails (``forgot``: 1 -> 0) and, as a control, the reverse (``gained``: 0 -> 1).
For each (the maths is in :mod:`aclarena.diagnostics.flips`):

1. **Replay.** E and L play the item greedily in the arena, each in lockstep with the other
   (:func:`play`): every generated token also gets the other model's top-1 and
   ``KL(p_E ‖ p_L)``. An item counts as *reproduced* when the replays give the matrix's
   outcomes (greedy decoding is deterministic, but a batch's padding can move a near-tie).
2. **Localization.** E's trajectory is scored teacher-forced under L with the scoring core
   (:func:`aclarena.probes.teacher_forcing.score`): the first position where L's top-1
   differs from E's token, the first where L's log-prob of E's token falls below a
   threshold, E's entropy there, its percentile in the trajectory, L's KL there, both
   tokens and both top-k. Over the items: the share of divergences in E's top 6% entropy
   positions against the share expected by chance, with intervals.
3. **Swap test** (reproduced ``forgot`` items). L regenerates the item; at positions where E
   and L disagree, E's token goes through at the top ``b%`` positions by KL (positions
   ranked on E's trajectory; ``b%`` of its tokens), or, as the control, at as many
   disagreeing positions chosen at random (seeded). Tool results and the reward come from
   the environment. The reverse direction lets L's tokens into E's generation. All rows
   (items x budgets x arms) of a direction are generated in one batched lockstep loop.

Results go to ``flips/<E>/<L>/<suite>`` in results.h5 (docs/store-format.md), written
completely or not at all. :func:`flips` is the Python API; ``aclarena-diag flips`` prints it.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from aclarena.analysis.paired import FORGOT, GAINED, flip_items
from aclarena.diagnostics.flips import (
    DEFAULT_BUDGETS,
    DEFAULT_TOP,
    ChanceShare,
    budget_count,
    chance_share,
    random_ordinals,
    recovery_curve,
    swap_notes,
    swap_threshold,
)
from aclarena.errors import AclarenaError
from aclarena.probes.lockstep import Swapper, generated_pieces, localize, lockstep_generate
from aclarena.results.flips import FlipsData, flips_key, read_flips_data, write_flips

if TYPE_CHECKING:
    import pandas as pd

    from aclarena.envs.base import Environment, Task, Trajectory
    from aclarena.models.loading import LoadOptions
    from aclarena.store.manifest import Manifest


# --- settings and results -------------------------------------------------------------------


@dataclass(frozen=True)
class FlipSettings:
    """How flips are analysed. Every field is part of the stored result's identity."""

    budgets: tuple[float, ...] = DEFAULT_BUDGETS
    top: float = DEFAULT_TOP
    logprob_below: float = math.log(0.1)
    topk: int = 5
    seed: int = 0
    max_items: int | None = None
    swap: bool = True
    reverse: bool = True
    batch_size: int = 16

    def __post_init__(self) -> None:
        b = tuple(self.budgets)
        if not b or any(not (isinstance(x, int | float) and 0 < x <= 100) for x in b) or len(set(b)) != len(b):
            raise AclarenaError(f"--budgets must be distinct percentages in (0, 100], e.g. 0.5,1,2,5,10,20; got {list(b)}")
        object.__setattr__(self, "budgets", tuple(sorted(float(x) for x in b)))
        if not (isinstance(self.top, int | float) and 0 < self.top < 1):
            raise AclarenaError(f"--top must be a fraction in (0, 1) (the study's share is 0.06), got {self.top!r}")
        if not (isinstance(self.logprob_below, int | float) and math.isfinite(self.logprob_below)
                and self.logprob_below < 0):
            raise AclarenaError(f"--logprob-below must be a log-prob < 0 (e.g. -2.3 = prob 0.1), got {self.logprob_below!r}")
        if not isinstance(self.topk, int) or self.topk < 1:
            raise AclarenaError(f"--topk must be an integer >= 1, got {self.topk!r}")
        if self.max_items is not None and (not isinstance(self.max_items, int) or self.max_items < 1):
            raise AclarenaError(f"--max-items must be an integer >= 1, got {self.max_items!r}")
        if not isinstance(self.batch_size, int) or self.batch_size < 1:
            raise AclarenaError(f"--batch-size must be an integer >= 1, got {self.batch_size!r}")

    def identity(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("batch_size")
        d["budgets"] = list(self.budgets)
        return d


@dataclass(frozen=True)
class FlipItem:
    """One flipped item: the matrix's outcomes, the replays, and where E's trajectory diverges under L."""

    item_id: str
    direction: str  # forgot (E 1 -> L 0) or gained (E 0 -> L 1)
    reproduced: bool
    e_reward: float
    l_reward: float
    n_positions: int
    diverge: int  # index among E's scored positions; -1: L agrees everywhere
    below: int  # first position where L's log-prob of E's token is below the threshold; -1: none
    e_token: str
    l_token: str
    e_entropy: float
    entropy_pct: float
    kl: float
    in_top: bool
    chance: float  # |top set| / n: the chance a random position is in it
    e_topk: list[tuple[str, float]] = field(default_factory=list)
    l_topk: list[tuple[str, float]] = field(default_factory=list)

    def row(self) -> dict[str, Any]:
        d = asdict(self)
        d["e_topk"] = [list(x) for x in self.e_topk]
        d["l_topk"] = [list(x) for x in self.l_topk]
        return d


@dataclass(frozen=True)
class SwapCurve:
    """Per budget, the share of items whose outcome the swaps changed (recovered or broken)."""

    direction: str  # forward (L generating, E's tokens let through) or reverse
    budgets: list[float]
    items: list[str]
    kl: np.ndarray  # items x budgets: 1 changed, 0 not, -1 not run
    random: np.ndarray
    swaps_kl: np.ndarray  # swaps made
    swaps_random: np.ndarray

    def curves(self) -> dict[str, dict[str, list[float]]]:
        return {"kl": recovery_curve(self.kl), "random": recovery_curve(self.random)}

    def notes(self) -> list[str]:
        """Budgets collapsing to one swap, random-control rows short of the KL arm's swaps (one line each)."""
        return swap_notes(self.direction, self.budgets, self.swaps_kl, self.swaps_random)

    def to_dict(self) -> dict[str, Any]:
        return {"direction": self.direction, "budgets": self.budgets, "items": self.items,
                "kl": self.kl.tolist(), "random": self.random.tolist(), "swaps_kl": self.swaps_kl.tolist(),
                "swaps_random": self.swaps_random.tolist(), "curves": self.curves()}


@dataclass(frozen=True)
class FlipsResult:
    """What :func:`flips` found for one (E, L, suite)."""

    early: str
    late: str
    suite: str
    relation: str
    n_items: int
    items: list[FlipItem]
    chance: dict[str, ChanceShare]
    forward: SwapCurve | None
    reverse: SwapCurve | None
    settings: dict[str, Any]
    cost: dict[str, float]
    trajectories: dict[str, dict[str, list[str]]] = field(default_factory=dict)  # item -> {"e": pieces, "l": pieces}
    cached: bool = False
    # the flipped items of the capability matrix, before ``--max-items`` (None: every one is in ``items``)
    total_forgot: int | None = None
    total_gained: int | None = None

    @property
    def forgot(self) -> list[FlipItem]:
        """The forgotten items analysed (at most ``--max-items``; :attr:`n_forgot` is the total)."""
        return [i for i in self.items if i.direction == FORGOT]

    @property
    def gained(self) -> list[FlipItem]:
        return [i for i in self.items if i.direction == GAINED]

    @property
    def n_forgot(self) -> int:
        """Items the matrix shows forgotten (E 1, L 0), all of them, capped or not."""
        return len(self.forgot) if self.total_forgot is None else self.total_forgot

    @property
    def n_gained(self) -> int:
        return len(self.gained) if self.total_gained is None else self.total_gained

    def counts(self) -> dict[str, Any]:
        """The totals and, beside them, how many of each were analysed (the store's attributes)."""
        return {"early": self.early, "late": self.late, "suite": self.suite, "n_items": self.n_items,
                "n_forgot": self.n_forgot, "n_gained": self.n_gained, "n_forgot_analysed": len(self.forgot),
                "n_gained_analysed": len(self.gained), "settings": self.settings}

    def to_dict(self) -> dict[str, Any]:
        return {"early": self.early, "late": self.late, "suite": self.suite, "relation": self.relation,
                "n_items": self.n_items, "n_forgot": self.n_forgot, "n_gained": self.n_gained,
                "n_forgot_analysed": len(self.forgot), "n_gained_analysed": len(self.gained),
                "max_items": self.settings.get("max_items"),
                "items": [i.row() for i in self.items],
                "chance": {k: v.to_dict() for k, v in self.chance.items()},
                "forward": self.forward.to_dict() if self.forward else None,
                "reverse": self.reverse.to_dict() if self.reverse else None,
                "settings": self.settings, "cost": self.cost, "cached": self.cached}

    def payload(self) -> FlipsData:
        """The stored form of this result (:mod:`aclarena.results.flips`)."""
        curves = {c.direction: {"budgets": c.budgets, "items": c.items, "kl": c.kl, "random": c.random,
                                "swaps_kl": c.swaps_kl, "swaps_random": c.swaps_random}
                  for c in (self.forward, self.reverse) if c is not None}
        summary = {"chance": {k: v.to_dict() for k, v in self.chance.items()}, "cost": self.cost,
                   "curves": {c.direction: c.curves() for c in (self.forward, self.reverse) if c is not None}}
        return FlipsData(early=self.early, late=self.late, suite=self.suite, relation=self.relation,
                         n_items=self.n_items, n_forgot=self.n_forgot, n_gained=self.n_gained,
                         n_forgot_analysed=len(self.forgot), n_gained_analysed=len(self.gained),
                         settings=self.settings, items=[i.row() for i in self.items], summary=summary,
                         forward=curves.get("forward"), reverse=curves.get("reverse"), trajectories=self.trajectories,
                         key=flips_key(self.early, self.late, self.suite))

    @classmethod
    def from_payload(cls, d: FlipsData) -> FlipsResult:
        """A stored result (``cached``: it was read, not computed)."""
        items = [FlipItem(**(row | {"e_topk": [tuple(x) for x in row["e_topk"]],
                                    "l_topk": [tuple(x) for x in row["l_topk"]]})) for row in d.items]

        def curve(name: str) -> SwapCurve | None:
            c = d.curve(name)
            if c is None:
                return None
            return SwapCurve(direction=name, budgets=c["budgets"], items=c["items"], kl=c["kl"], random=c["random"],
                             swaps_kl=c["swaps_kl"], swaps_random=c["swaps_random"])

        chance = {k: ChanceShare(**v) for k, v in d.summary["chance"].items()}
        return cls(early=d.early, late=d.late, suite=d.suite, relation=d.relation, n_items=d.n_items, items=items,
                   chance=chance, forward=curve("forward"), reverse=curve("reverse"), settings=d.settings,
                   cost=dict(d.summary["cost"]), trajectories=d.trajectories, cached=True, total_forgot=d.n_forgot,
                   total_gained=d.n_gained)

    def to_pandas(self) -> pd.DataFrame:
        """One row per flipped item (forgot and gained), with its swap outcomes per budget."""
        import pandas as pd

        rows = []
        for it in self.items:
            r = it.row()
            r.pop("e_topk")
            r.pop("l_topk")
            for curve, tag in ((self.forward, "recovered"), (self.reverse, "broken")):
                if curve is None or it.item_id not in curve.items or it.direction != FORGOT:
                    continue
                i = curve.items.index(it.item_id)
                for j, b in enumerate(curve.budgets):
                    r[f"{tag}_kl@{b:g}%"] = int(curve.kl[i, j])
                    r[f"{tag}_random@{b:g}%"] = int(curve.random[i, j])
            rows.append(r)
        return pd.DataFrame(rows)


# --- playing an item in lockstep ------------------------------------------------------------


def _max_positions(model: Any) -> int:
    from aclarena.models.arch import context_length

    return context_length(model.config) or 1 << 30  # no length in the config: no bound


def play(
    tasks: Sequence[Task],
    swappers: Sequence[Swapper],
    e_model: Any,
    l_model: Any,
    tokenizer: Any,
    *,
    driver: str,
    batch_size: int = 16,
    env_for: Callable[[Task], Environment] | None = None,
    on_batch: Callable[[int], None] | None = None,
    prompt_format: str = "chat",
) -> list[Trajectory]:
    """Play ``tasks`` with ``driver`` generating in lockstep with the other model (see
    :func:`lockstep_generate`); tool results, user replies and rewards come from each task's
    environment, as in :func:`aclarena.envs.rollout.run_episodes`. Swappers keep their state
    across an episode's turns. Prompts are rendered in ``prompt_format``, as eval renders them
    (:func:`aclarena.models.chat.render_prompt`)."""
    from aclarena.envs.rollout import Episode, env_of, stop_token_ids
    from aclarena.models.chat import cut_reply, render_prompt, reply_end

    if len(tasks) != len(swappers):
        raise ValueError(f"{len(tasks)} tasks but {len(swappers)} swappers")
    resolve = env_for or env_of
    stops = stop_token_ids(e_model, tokenizer)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else stops[0]
    limit = min(_max_positions(e_model), _max_positions(l_model))
    out: list[Trajectory] = []
    for start in range(0, len(tasks), batch_size):
        episodes = [Episode(resolve(t), t) for t in tasks[start:start + batch_size]]
        rows = swappers[start:start + batch_size]
        while True:
            live = [i for i, e in enumerate(episodes) if not e.done]
            if not live:
                break
            contexts, keep = [], []
            for i in live:
                msgs, tools = episodes[i].conversation
                text = render_prompt(tokenizer, msgs, tools, prompt_format=prompt_format)
                ids = tokenizer(text, add_special_tokens=False)["input_ids"]
                if len(ids) + episodes[i].env.max_new_tokens > limit:
                    episodes[i].act(None)  # the context is full, as model_policy does
                    continue
                contexts.append(ids)
                rows[i].contexts.append(list(ids))
                keep.append(i)
            if not keep:
                continue
            gen = lockstep_generate(e_model, l_model, driver, contexts, [rows[i] for i in keep],
                                    max_new_tokens=[episodes[i].env.max_new_tokens for i in keep],
                                    stop_ids=stops, pad_id=pad_id,
                                    stop_text=None if prompt_format == "chat" else (
                                        lambda toks: reply_end(tokenizer.decode(toks, skip_special_tokens=False),
                                                               prompt_format) is not None))
            stop_set = set(stops)
            for i, toks in zip(keep, gen, strict=True):
                rows[i].turns.append(list(toks))
                cut = next((j for j, t in enumerate(toks) if t in stop_set), len(toks))
                episodes[i].act(cut_reply(tokenizer, toks[:cut], prompt_format)[1])
        out.extend(e.result() for e in episodes)
        if on_batch is not None:
            on_batch(len(episodes))
    return out


# --- the swap test --------------------------------------------------------------------------


RANDOM_REDRAWS = 4  # draws of a random-control row that fell short of the KL arm's swaps (see swap_test)


def swap_rows(
    replays: Sequence[Swapper],
    budgets: Sequence[float],
    seed: int,
) -> tuple[list[tuple[int, int, Swapper]], list[tuple[int, int, Swapper]]]:
    """For each item's E replay (its generated tokens, KL and disagreements), the swappers of
    both arms at every budget: ``(item, budget index, swapper)`` for the KL arm and for the
    random control. Budgets count positions of E's trajectory; both arms get the same number."""
    kl_rows, rnd_rows = [], []
    for i, rep in enumerate(replays):
        kl = np.asarray(rep.kl, dtype=np.float64)
        dis = np.asarray(rep.disagree, dtype=bool)
        n, m = len(kl), int(dis.sum())
        for j, b in enumerate(budgets):
            k = min(budget_count(b, n), m)
            rng = np.random.default_rng([seed, i, j])
            kl_rows.append((i, j, Swapper("kl", k=k, tau=swap_threshold(kl, dis, k))))
            rnd_rows.append((i, j, Swapper("random", k=k, ordinals=random_ordinals(m, k, rng))))
    return kl_rows, rnd_rows


def swap_test(
    tasks: Sequence[Task],
    replays: Sequence[Swapper],
    e_model: Any,
    l_model: Any,
    tokenizer: Any,
    *,
    direction: str,
    budgets: Sequence[float] = DEFAULT_BUDGETS,
    seed: int = 0,
    batch_size: int = 16,
    env_for: Callable[[Task], Environment] | None = None,
    on_batch: Callable[[int], None] | None = None,
    prompt_format: str = "chat",
) -> SwapCurve:
    """The swap test on items whose E replays are ``replays`` (E generating, L in lockstep).

    ``forward``: L generates and E's tokens go through; an item is *changed* when the swaps
    make L solve it. ``reverse``: E generates and L's tokens go through; *changed* when the
    swaps make E fail it. One batched lockstep generation per item, budget and arm.
    """
    if direction not in ("forward", "reverse"):
        raise ValueError(f"`direction` must be forward or reverse, got {direction!r}")
    driver = "l" if direction == "forward" else "e"
    shape = (len(tasks), len(budgets))
    arrays = {name: np.full(shape, -1, dtype=np.int8) for name in ("kl", "random")}
    swaps = {name: np.zeros(shape, dtype=np.int32) for name in ("kl", "random")}

    def run(rows: list[tuple[int, int, Swapper]], report: Callable[[int], None] | None) -> None:
        trajs = play([tasks[i] for i, _, _ in rows], [s for _, _, s in rows], e_model, l_model, tokenizer,
                     driver=driver, batch_size=batch_size, env_for=env_for, on_batch=report,
                     prompt_format=prompt_format)
        for (i, j, sw), tr in zip(rows, trajs, strict=True):
            solved = tr.reward >= 0.5
            arrays[sw.mode][i, j] = int(solved if direction == "forward" else not solved)
            swaps[sw.mode][i, j] = sw.used

    kl_rows, rnd_rows = swap_rows(replays, budgets, seed)
    run(kl_rows, on_batch)
    # The random control makes as many swaps as the KL arm made (swap for swap), at disagreeing positions
    # drawn at random. Its first draw is among E's replay's disagreements; the live generation departs
    # from that replay (an unswapped disagreement changes the path), so a draw may name a disagreement that
    # never comes. Such a row is drawn again among the disagreements its own generation met, up to
    # RANDOM_REDRAWS times (the path up to the first swap does not depend on the draw, so one swap is always
    # reached); rows still short stay short, and `swap_notes` says how many.
    pending = []
    for i, j, _ in rnd_rows:  # swap_rows' draw (the same generator) with the KL arm's count of swaps
        k = int(swaps["kl"][i, j])
        m = int(np.asarray(replays[i].disagree, dtype=bool).sum())
        pending.append((i, j, Swapper("random", k=k, ordinals=random_ordinals(m, k, np.random.default_rng([seed, i, j])))))
    for attempt in range(RANDOM_REDRAWS + 1):
        run(pending, on_batch if attempt == 0 else None)
        short = [(i, j, sw) for i, j, sw in pending if sw.used < sw.k]
        if not short or attempt == RANDOM_REDRAWS:
            break
        pending = [(i, j, Swapper("random", k=sw.k, ordinals=random_ordinals(
            max(sw.seen, sw.k), sw.k, np.random.default_rng([seed, i, j, attempt + 1])))) for i, j, sw in short]
    return SwapCurve(direction=direction, budgets=[float(b) for b in budgets], items=[t.id for t in tasks],
                     kl=arrays["kl"], random=arrays["random"], swaps_kl=swaps["kl"], swaps_random=swaps["random"])


# --- from a run ------------------------------------------------------------------------------


def _relation(manifest: Manifest, early: str, late: str) -> str:
    if early in manifest.ancestors(late):
        return f"{late} descends from {early}"
    if late in manifest.ancestors(early):
        return f"{early} descends from {late} (the pair runs backwards in the chain)"
    return f"{early} and {late} are not ancestor and descendant (compared all the same)"


def _tasks_of(suite: str, settings: dict[str, Any]) -> dict[str, Task]:
    from aclarena.envs import sample_tasks

    tasks: dict[str, Task] = {}
    for seed in settings.get("seeds", [0]):
        for t in sample_tasks(suite, int(settings.get("n", 0)), seed=int(seed), split=settings.get("split", "eval")):
            tasks.setdefault(t.id, t)
    return tasks


def read_flips(run_dir: str | Path, early: str, late: str, suite: str) -> FlipsResult | None:
    """The stored result of (E, L, suite), or None."""
    from aclarena.store import ResultsStore

    store = ResultsStore(run_dir)
    key = flips_key(early, late, suite)
    if not store.exists() or not store.has(key):
        return None
    with store.reader() as r:
        return FlipsResult.from_payload(read_flips_data(r, key))


def flips(
    run_dir: str | Path,
    early: str,
    late: str,
    suite: str,
    settings: FlipSettings | None = None,
    *,
    load: LoadOptions | None = None,
    force: bool = False,
    write: bool = True,
    progress: Callable[[str, int, int], None] | None = None,
    allow_code: bool = False,
) -> FlipsResult:
    """Locate and test the flips of ``suite``'s items between checkpoints ``early`` (E) and ``late`` (L).

    Args:
        run_dir: the run folder (aclarena.toml, results.h5 with the capability matrix).
        early, late: manifest names of E and L (any two: a pair that is not ancestor and
            descendant is compared too, and the result says so).
        suite: a suite evaluated for both: an arena suite (``math/id``...) or one of the manifest's
            ``[suites.NAME]`` (:mod:`aclarena.envs.custom`).
        settings: budgets, top share, threshold, seed... (:class:`FlipSettings`).
        load: :class:`aclarena.models.loading.LoadOptions` (default: CPU, float32).
        force: recompute even when a result with the same settings is stored.
        write: store the result under ``flips/<E>/<L>/<suite>``.
        progress: called with (phase, done, total).
        allow_code: allow a custom suite scored by a Python callable (it runs code the manifest names).

    Raises:
        AclarenaError: one line naming what is wrong: unknown names, no per-item outcomes,
            different tokenizers, a non-arena suite, a pair with no flips.
    """
    from aclarena.envs.custom import register_suites
    from aclarena.models.checkpoint import inspect, require_same_tokenizer
    from aclarena.models.loading import LoadOptions, load_model, load_tokenizer
    from aclarena.models.tensors import weights_fingerprint
    from aclarena.results.capability import open_matrix
    from aclarena.store import load_manifest

    settings = settings or FlipSettings()
    manifest = load_manifest(run_dir)
    register_suites(manifest, run_dir, allow_code=allow_code)
    early, late = manifest.resolve(early).name, manifest.resolve(late).name
    if early == late:
        raise AclarenaError(f"--from and --to are both {early!r}; give two checkpoints (e.g. --from seq-math --to seq-ecom)")
    relation = _relation(manifest, early, late)
    with open_matrix(run_dir, manifest) as (reader, _):
        pairs, cell_settings, n_common, made_from, _ = flip_items(reader, manifest, early, late, suite)
    if not pairs:
        raise AclarenaError(f"{early!r} and {late!r} solve the same items of {suite!r} ({n_common} compared): nothing "
                            "flipped; pick another pair or suite, or evaluate more items (eval -n)")
    opts = load or LoadOptions()
    infos = [inspect(manifest.resolve(n), manifest, run_dir, allow_pickle=opts.allow_pickle) for n in (early, late)]
    for info in infos:
        info.require_loadable()
    require_same_tokenizer(infos)
    # what the result depends on besides the settings: the matrix cells and both checkpoints' weight files
    ident = settings.identity() | {"inputs": {"cells": made_from, "dtype": opts.dtype,
                                              "weights": [weights_fingerprint(i, manifest, run_dir) for i in infos]}}
    if not force and write:
        old = read_flips(run_dir, early, late, suite)
        if old is not None and old.settings == ident:
            return old
    tasks_by_id = _tasks_of(suite, cell_settings)
    missing = [i for i, _ in pairs if i not in tasks_by_id]
    if missing:
        raise AclarenaError(f"{len(missing)} flipped items of {suite!r} (e.g. {missing[0]!r}) are not tasks of this arena "
                            "version; rerun `aclarena-diag eval` to refresh the matrix")
    totals = {d: sum(1 for _, x in pairs if x == d) for d in (FORGOT, GAINED)}
    if settings.max_items is not None:
        by_dir: dict[str, int] = {}
        kept = []
        for i, d in pairs:
            if by_dir.get(d, 0) < settings.max_items:
                kept.append((i, d))
                by_dir[d] = by_dir.get(d, 0) + 1
        pairs = kept
    # replayed in the prompt format eval played both cells in (they share their settings, format included)
    prompt_format = str(cell_settings.get("prompt_format", "chat"))
    tok = load_tokenizer(early, manifest, run_dir, require_chat_template=prompt_format == "chat")
    e_model = load_model(early, manifest, run_dir, opts)
    l_model = load_model(late, manifest, run_dir, opts)
    result = analyse(e_model, l_model, tok, [tasks_by_id[i] for i, _ in pairs], [d for _, d in pairs],
                     settings=settings, early=early, late=late, suite=suite, relation=relation, n_items=n_common,
                     progress=progress, prompt_format=prompt_format)
    result = replace(result, settings=ident, total_forgot=totals[FORGOT], total_gained=totals[GAINED])
    if write:
        write_flips(run_dir, result.payload(), manifest_text=manifest.to_toml())
    return result


def analyse(
    e_model: Any,
    l_model: Any,
    tokenizer: Any,
    tasks: Sequence[Task],
    directions: Sequence[str],
    *,
    settings: FlipSettings | None = None,
    early: str = "E",
    late: str = "L",
    suite: str = "",
    relation: str = "",
    n_items: int | None = None,
    env_for: Callable[[Task], Environment] | None = None,
    progress: Callable[[str, int, int], None] | None = None,
    prompt_format: str = "chat",
) -> FlipsResult:
    """The whole analysis on loaded models and given tasks (``directions[i]``: forgot or gained).

    The run-free core of :func:`flips`; ``env_for`` maps a task to its environment (default:
    the arena's); ``prompt_format`` renders the prompts (``chat`` or ``plain``, as eval did).
    """
    settings = settings or FlipSettings()
    if len(tasks) != len(directions):
        raise ValueError(f"{len(tasks)} tasks but {len(directions)} directions")
    bs = settings.batch_size
    cost: dict[str, float] = {}

    def tick(phase: str, total: int) -> Callable[[int], None]:
        done = [0]

        def f(k: int) -> None:
            done[0] += k
            if progress is not None:
                progress(phase, done[0], total)

        return f

    t0 = time.perf_counter()
    e_rep = [Swapper() for _ in tasks]
    e_tr = play(tasks, e_rep, e_model, l_model, tokenizer, driver="e", batch_size=bs, env_for=env_for,
                on_batch=tick("replay E", len(tasks)), prompt_format=prompt_format)
    l_rep = [Swapper() for _ in tasks]
    l_tr = play(tasks, l_rep, e_model, l_model, tokenizer, driver="l", batch_size=bs, env_for=env_for,
                on_batch=tick("replay L", len(tasks)), prompt_format=prompt_format)
    cost["replay_s"] = time.perf_counter() - t0
    t1 = time.perf_counter()
    loc = localize(e_model, l_model, tokenizer, e_rep, top=settings.top, logprob_below=settings.logprob_below,
                   topk=settings.topk, batch_size=min(bs, 8), early=early)
    cost["localize_s"] = time.perf_counter() - t1
    items = []
    trajectories: dict[str, dict[str, list[str]]] = {}
    for t, d, et, lt, lr, info in zip(tasks, directions, e_tr, l_tr, l_rep, loc, strict=True):
        want_e, want_l = (1.0, 0.0) if d == FORGOT else (0.0, 1.0)
        reproduced = (et.reward >= 0.5) == (want_e >= 0.5) and (lt.reward >= 0.5) == (want_l >= 0.5)
        items.append(FlipItem(item_id=t.id, direction=d, reproduced=reproduced, e_reward=et.reward, l_reward=lt.reward,
                              n_positions=info["n_positions"], diverge=info["diverge"], below=info["below"],
                              e_token=info["e_token"], l_token=info["l_token"], e_entropy=info["e_entropy"],
                              entropy_pct=info["entropy_pct"], kl=info["kl"], in_top=info["in_top"],
                              chance=info["chance"], e_topk=info["e_topk"], l_topk=info["l_topk"]))
        trajectories[t.id] = {"e": info["pieces"], "l": generated_pieces(tokenizer, lr)}
    chance = {}
    for d in (FORGOT, GAINED):
        sel = [it for it in items if it.direction == d and it.reproduced and it.diverge >= 0]
        chance[d] = chance_share(np.array([it.in_top for it in sel], dtype=bool),
                                 np.array([it.chance for it in sel], dtype=np.float64))
    forward = reverse = None
    test = [k for k, it in enumerate(items) if it.direction == FORGOT and it.reproduced]
    if settings.swap and test:
        t2 = time.perf_counter()
        sub_tasks = [tasks[k] for k in test]
        sub_rep = [e_rep[k] for k in test]
        n_rows = 2 * len(test) * len(settings.budgets)
        forward = swap_test(sub_tasks, sub_rep, e_model, l_model, tokenizer, direction="forward",
                            budgets=settings.budgets, seed=settings.seed, batch_size=bs, env_for=env_for,
                            on_batch=tick("swap test", n_rows), prompt_format=prompt_format)
        cost["swap_forward_s"] = time.perf_counter() - t2
        if settings.reverse:
            t3 = time.perf_counter()
            reverse = swap_test(sub_tasks, sub_rep, e_model, l_model, tokenizer, direction="reverse",
                                budgets=settings.budgets, seed=settings.seed, batch_size=bs, env_for=env_for,
                                on_batch=tick("reverse swap test", n_rows), prompt_format=prompt_format)
            cost["swap_reverse_s"] = time.perf_counter() - t3
    total = time.perf_counter() - t0
    cost["total_s"] = total
    cost["per_item_s"] = total / len(tasks) if tasks else float("nan")
    cost["swap_items"] = float(len(test))
    return FlipsResult(early=early, late=late, suite=suite, relation=relation,
                       n_items=len(tasks) if n_items is None else n_items, items=items, chance=chance,
                       forward=forward, reverse=reverse, settings=settings.identity(), cost=cost,
                       trajectories=trajectories)
