"""A run folder from Python: its manifest (aclarena.toml), its store (results.h5) and every analysis.

    import aclarena as acl
    run = acl.Run("runs/demo")
    run.checkpoints()                      # DataFrame: lineage, sizes, loadable
    drift = run.tokens(ref="seq-math")     # scored once, cached in the store -> TokenDrift
    run.vectors().cosines()                # DataFrame
    run.eval(suites="id", n=50).to_pandas()   # the capability matrix (cells stored, reused on a rerun)
    run.consolidate("merge-uniform")       # a consolidated checkpoint, added to the manifest
    run.forgetting().metrics               # ACC, BWT, FWT, ...
    run.flips("seq-math", "seq-ecom", "math/id").to_pandas()   # why items were forgotten
    run.signatures().to_pandas()           # drift signature of every SFT/RL phase, stage, consolidation
    run.repair("seq-search", "seq-ecom", method="dg-hard", name="ecom-dg")   # training-free repair

Each method calls the same analysis as the matching ``aclarena-diag`` verb, with the same
defaults, and returns its typed result (``.to_pandas()``, ``.to_dict()``, ``.writes``). Torch is
imported only by the analyses that run models or read weights (tokens, vectors, displacement).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aclarena.analysis._common import RunPath
from aclarena.analysis.checkpoints import CheckpointsResult, checkpoints
from aclarena.analysis.compare import CompareResult, compare
from aclarena.analysis.forgetting import ForgettingResult, forgetting
from aclarena.store import Manifest, ResultsStore, load_manifest

if TYPE_CHECKING:
    import pandas as pd

    from aclarena.analysis.consolidate import ConsolidateResult
    from aclarena.analysis.displacement import DisplacementResult
    from aclarena.analysis.eval import EvalResult
    from aclarena.analysis.flips import FlipSettings, FlipsResult
    from aclarena.analysis.repair import RepairRunResult
    from aclarena.analysis.signatures import SignaturesResult
    from aclarena.analysis.tokens import TokenDrift
    from aclarena.analysis.vectors import VectorsResult
    from aclarena.consolidate.options import ConsolidateOptions


class Run:
    """A run folder: ``aclarena.toml`` (read now: a missing or invalid manifest fails here) and ``results.h5``."""

    def __init__(self, path: RunPath) -> None:
        self.path = Path(os.fspath(path))
        self.manifest: Manifest = load_manifest(self.path)

    def __repr__(self) -> str:
        return f"Run({str(self.path)!r}: {len(self.manifest)} checkpoints, base {self.manifest.base!r})"

    @property
    def name(self) -> str:
        return self.manifest.name

    @property
    def store(self) -> ResultsStore:
        """The run's results store (results.h5; it may not exist yet)."""
        return ResultsStore(self.path)

    def checkpoints(self, *, allow_pickle: bool = False) -> pd.DataFrame:
        """DataFrame, one row per checkpoint: kind, domain, phase, parent, size, dtype, tokenizer, loadable."""
        return self.inspect(allow_pickle=allow_pickle).to_pandas()

    def inspect(self, *, allow_pickle: bool = False) -> CheckpointsResult:
        """The checkpoints as a typed result (what ``aclarena-diag checkpoints`` prints)."""
        return checkpoints(self.path, allow_pickle=allow_pickle, manifest=self.manifest)

    def tokens(self, ref: str, *, probe: str | None = None, against: str | Sequence[str] = "later",
               high: str = "q=0.06", eps: float = 0.05, batch_size: int = 8, chunk_size: int | None = None,
               topk: int = 5, force: bool = False, device: str = "cpu", dtype: str = "auto",
               allow_pickle: bool = False, show_progress: bool = False) -> TokenDrift:
        """Token drift of the checkpoints after ``ref`` on its probe set (scored once, then read from the
        store): a :class:`~aclarena.analysis.tokens.TokenDrift`. Options as ``aclarena-diag tokens``."""
        from aclarena.analysis.tokens import TokensOptions, tokens
        from aclarena.models.loading import LoadOptions

        options = TokensOptions(probe=probe, against=tuple(against) if not isinstance(against, str) else against,
                                high=high, eps=eps, batch_size=batch_size, chunk_size=chunk_size, topk=topk,
                                force=force, load=LoadOptions(dtype=dtype, device=device, allow_pickle=allow_pickle))
        return tokens(self.path, ref, options, show_progress=show_progress, manifest=self.manifest)

    def signatures(self, *, updates: str | Sequence[str] | None = None, n: int | None = None,
                   max_new_tokens: int | None = None, first_k: int | None = None, high: str = "q=0.06",
                   eps: float = 0.05, n_boot: int | None = None, level: float = 0.95, seed: int = 0,
                   batch_size: int = 8, force: bool = False, device: str = "cpu", dtype: str = "auto",
                   allow_pickle: bool = False, show_progress: bool = False) -> SignaturesResult:
        """Drift signatures of the run's updates (each SFT and RL phase, multi-phase stage, consolidation; or
        those ``updates`` names) on their parents' generations: a
        :class:`~aclarena.analysis.signatures.SignaturesResult` (``.to_pandas()``). Options as
        ``aclarena-diag signatures``; None keeps its default."""
        from aclarena.analysis.signatures import SignaturesOptions, signatures
        from aclarena.models.loading import LoadOptions

        given = {k: v for k, v in (("n", n), ("max_new_tokens", max_new_tokens), ("first_k", first_k),
                                   ("n_boot", n_boot)) if v is not None}
        options = SignaturesOptions(updates=updates if updates is None or isinstance(updates, str) else tuple(updates),
                                    high=high, eps=eps, level=level, seed=seed, batch_size=batch_size, force=force,
                                    load=LoadOptions(dtype=dtype, device=device, allow_pickle=allow_pickle), **given)
        return signatures(self.path, options, show_progress=show_progress, manifest=self.manifest)

    def vectors(self, *, checkpoints: str | Sequence[str] | None = None, pairs: Sequence[str] = (),
                force: bool = False, show_progress: bool = False) -> VectorsResult:
        """Task vectors of the run: a :class:`~aclarena.analysis.vectors.VectorsResult` (``.cosines()``)."""
        from aclarena.analysis.vectors import VectorsOptions, vectors

        options = VectorsOptions(checkpoints=checkpoints if checkpoints is None or isinstance(checkpoints, str)
                                 else tuple(checkpoints), pairs=tuple(pairs), force=force)
        return vectors(self.path, options, show_progress=show_progress, manifest=self.manifest)

    def displacement(self, *, checkpoints: str | Sequence[str] | None = None,
                     tolerances: str | Sequence[float] | None = None, force: bool = False,
                     show_progress: bool = False) -> DisplacementResult:
        """SFT vs RL parameter displacement: a :class:`~aclarena.analysis.displacement.DisplacementResult`
        (``tolerances`` default: 0, 1e-8, ..., 1e-3)."""
        from aclarena.analysis.displacement import DEFAULT_TOLERANCES, DisplacementOptions, displacement

        options = DisplacementOptions(
            checkpoints=checkpoints if checkpoints is None or isinstance(checkpoints, str) else tuple(checkpoints),
            tolerances=DEFAULT_TOLERANCES if tolerances is None else
            tolerances if isinstance(tolerances, str) else tuple(tolerances), force=force)
        return displacement(self.path, options, show_progress=show_progress, manifest=self.manifest)

    def eval(self, *, checkpoints: str | Sequence[str] | None = None, suites: str | None = None, n: int = 100,
             samples: int = 4, seeds: Sequence[int] = (0,), temperature: float = 1.0, top_p: float = 1.0,
             batch_size: int = 32, device: str = "cpu", dtype: str = "auto", force: bool = False,
             show_progress: bool = False) -> EvalResult:
        """Score checkpoints on the arena suites (greedy and avg@``samples``): the capability matrix, an
        :class:`~aclarena.analysis.eval.EvalResult`. Cells are stored and reused; options as ``aclarena-diag eval``."""
        from aclarena.analysis.eval import EvalOptions, evaluate

        options = EvalOptions(checkpoints=checkpoints if checkpoints is None or isinstance(checkpoints, str)
                              else tuple(checkpoints), suites=suites, n=n, samples=samples, seeds=tuple(seeds),
                              temperature=temperature, top_p=top_p, batch_size=batch_size, device=device, dtype=dtype,
                              force=force)
        return evaluate(self.path, options, show_progress=show_progress, manifest=self.manifest)

    def consolidate(self, method: str, *, seeds: int = 1, options: ConsolidateOptions | None = None,
                    force: bool = False, show_progress: bool = False, **settings: Any) -> ConsolidateResult:
        """Consolidated models from the stage checkpoints (``merge-uniform``, ``sdft``, ``mle``, ...), added to
        the manifest: a :class:`~aclarena.analysis.consolidate.ConsolidateResult`. The method's options as
        ``aclarena-diag consolidate`` takes them: its options class (:mod:`aclarena.consolidate.options`, e.g.
        ``MergeTiesOptions(density=0.3)``) or its fields as keywords (``density=0.3``)."""
        from aclarena.analysis.consolidate import consolidate

        try:
            return consolidate(self.path, method, seeds=seeds, options=options, force=force,
                               show_progress=show_progress, manifest=self.manifest, **settings)
        finally:  # the outputs are in the manifest now (also those made before a failure)
            self.manifest = load_manifest(self.path)

    def forgetting(self, *, chain: str | None = None, suite_of: Mapping[str, str] | None = None,
                   settings: str | None = None) -> ForgettingResult:
        """Continual-learning metrics of the capability matrix (run ``eval`` first):
        a :class:`~aclarena.analysis.forgetting.ForgettingResult` (``.metrics``)."""
        from aclarena.results.capability import SeveralChainsError

        try:
            return forgetting(self.path, chain=chain, suite_of=suite_of, settings=settings, manifest=self.manifest)
        except SeveralChainsError as e:
            raise e.how("chain=NAME") from None

    def compare(self, *, router: str = "rule", score: str = "greedy", settings: str | None = None,
                repair_pair: tuple[str, str] | None = None) -> CompareResult:
        """The study-shaped comparison of consolidation methods: a :class:`~aclarena.analysis.compare.CompareResult`
        (``.repairs``: the four-part score of each repair, or of every consolidation against ``repair_pair``)."""
        return compare(self.path, router=router, score=score, settings=settings, manifest=self.manifest,
                       repair_pair=repair_pair)

    def flips(self, early: str, late: str, suite: str, *, settings: FlipSettings | None = None, force: bool = False,
              device: str = "cpu", dtype: str = "auto", allow_pickle: bool = False) -> FlipsResult:
        """The items ``early`` solved and ``late`` fails on ``suite``, where their paths part, and the swap
        test: a :class:`~aclarena.analysis.flips.FlipsResult` (``settings``: a
        :class:`~aclarena.analysis.flips.FlipSettings`). Options as ``aclarena-diag flips``."""
        from aclarena.analysis.flips import flips
        from aclarena.models.loading import LoadOptions

        return flips(self.path, early, late, suite, settings,
                     load=LoadOptions(dtype=dtype, device=device, allow_pickle=allow_pickle), force=force)

    def repair(self, old: str, new: str, *, method: str, name: str,
               percents: str | float | Sequence[float] | None = None, modules: str | Sequence[str] = (),
               layers: str | Sequence[int] | None = None, select: str | None = None, fraction: float = 0.25,
               count: int | None = None, compute_dtype: str = "float32", force: bool = False) -> RepairRunResult:
        """Repair what the stage from ``old`` to ``new`` forgot, from the two checkpoints (no training): a
        :class:`~aclarena.analysis.repair.RepairRunResult`; the outputs join the manifest as consolidated
        checkpoints. Options as ``aclarena-diag repair``."""
        from aclarena.analysis.repair import RepairOptions, repair

        options = RepairOptions(
            method=method, name=name, percents=percents if percents is None or isinstance(percents, str | float | int)
            else tuple(percents), modules=modules if isinstance(modules, str) else tuple(modules),
            layers=layers if layers is None or isinstance(layers, str) else tuple(layers), select=select,
            fraction=fraction, count=count, compute_dtype=compute_dtype, force=force)
        result = repair(self.path, old, new, options)
        self.manifest = load_manifest(self.path)
        return result
