"""Which items a later checkpoint lost and gained, paired item by item from the capability matrix.

:func:`flip_items` pairs two cells' greedy per-item outcomes (refusing cells that cannot be paired:
missing, errors, stale, other settings or prompt formats); :func:`paired_change` counts the items
lost and gained per suite with the one-sided exact McNemar p of a drop (the demo's and the
monitor's ground-truth test) and the chance-adjusted counts (arXiv 2510.17776);
:func:`imported_flips` lists them for an imported (lm-eval) suite, where nothing is replayed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from aclarena.errors import AclarenaError

if TYPE_CHECKING:
    from aclarena.store.manifest import Manifest
    from aclarena.store.results import StoreReader


FORGOT, GAINED = "forgot", "gained"



def flip_items(reader: StoreReader, manifest: Manifest, early: str, late: str, suite: str, *, played: bool = True
               ) -> tuple[list[tuple[str, str]], dict[str, Any], int, list[str], int]:
    """``[(item id, forgot|gained)]`` from the matrix's greedy outcomes, the cell settings, the number
    of items compared, the two cells' keys and write times (what the result was made from), and the
    number of items both fail (for the chance adjustment).

    ``played=False`` also takes imported cells (lm-eval per-sample scores): their items are paired by
    ``doc_id`` when both cells score the same task with the same metric (each cell has its own
    results file, so their settings differ by that file's hash)."""
    from aclarena.envs.custom import stale_cell
    from aclarena.results.capability import load_matrix, read_items

    matrix = load_matrix(reader, manifest)
    cells = {}
    for name in (early, late):
        cell = matrix.get(name, suite)
        if cell is None:
            have = sorted({s for (c, s) in matrix.cells if c == name})
            raise AclarenaError(f"{name!r} has no capability cell on suite {suite!r} (it has: {', '.join(have) or 'none'}); "
                                f"run `aclarena-diag eval --suites {suite}` first")
        if not cell.ok:
            raise AclarenaError(f"the {suite!r} cell of {name!r} is an error ({cell.error}); rerun eval for it")
        if cell.source != "arena" and played:
            raise AclarenaError(f"suite {suite!r} of {name!r} was imported from {cell.source}, not played in the arena: "
                                "flips replays items in their environment to score them; use an arena suite (math/id, ...)")
        stale = stale_cell(suite, cell.settings) if played else None
        if stale is not None:  # the replayed tasks would be today's, the outcomes those of the old file
            raise AclarenaError(f"{stale}: the {suite!r} cell of {name!r} is stale; rerun `aclarena-diag eval --suites "
                                f"{suite}` for both checkpoints")
        cells[name] = cell
    if not played and cells[early].source != "arena":
        same = [{k: v for k, v in c.settings.items() if k != "file_sha256"} for c in cells.values()]
        if same[0] != same[1]:
            raise AclarenaError(f"{early!r} and {late!r} were imported on {suite!r} with different tasks or metrics "
                                f"({same[0]} vs {same[1]}); import both with the same --lm-eval-metric")
    elif (cells[early].settings.get("prompt_format", "chat") != cells[late].settings.get("prompt_format", "chat")
          and played):
        formats = [str(c.settings.get("prompt_format", "chat")) for c in cells.values()]
        raise AclarenaError(f"{early!r} was evaluated on {suite!r} in the {formats[0]} prompt format and {late!r} in the "
                            f"{formats[1]} one; flips replays both on the same prompts: set the same prompt_format for "
                            "both in aclarena.toml and rerun `aclarena-diag eval`")
    elif cells[early].key.rsplit("/", 1)[-1] != cells[late].key.rsplit("/", 1)[-1]:
        raise AclarenaError(f"{early!r} and {late!r} were evaluated on {suite!r} with different settings, so their items "
                            f"differ; rerun `aclarena-diag eval --suites {suite}` with the same settings for both")
    items = {}
    for name, cell in cells.items():
        got = read_items(reader, cell)
        if got is None:
            raise AclarenaError(f"the {suite!r} cell of {name!r} has no per-item outcomes; rerun "
                                f"`aclarena-diag eval --suites {suite} --force` to record them")
        ids, scores = got
        items[name] = dict(zip(ids, scores.reshape(-1).tolist(), strict=True))
    e, l_ = items[early], items[late]
    common = [i for i in e if i in l_]
    out = [(i, FORGOT) for i in common if e[i] >= 0.5 > l_[i]] + [(i, GAINED) for i in common if l_[i] >= 0.5 > e[i]]
    made_from = [f"{c.key}@{c.computed_at!r}" for c in cells.values()]
    wrong_both = sum(1 for i in common if e[i] < 0.5 and l_[i] < 0.5)
    return out, cells[early].settings, len(common), made_from, wrong_both



def paired_change(run_dir: str | Path, early: str, late: str, suites: Sequence[str]) -> dict[str, dict[str, Any]]:
    """Per suite, from the matrix's greedy per-item outcomes: the items ``early`` solved and ``late``
    fails (``lost``), the reverse (``gained``), the items compared (``n``) and the one-sided exact
    McNemar p of a drop (``p_drop``, the monitor's ground-truth test); ``{"error": line}`` for a
    suite that cannot be paired (no cell, no per-item outcomes, other settings)."""
    from aclarena.diagnostics.cl_metrics import chance_adjusted
    from aclarena.diagnostics.early_warning import mcnemar_drop_pvalue
    from aclarena.envs import suite_chance
    from aclarena.results.capability import open_matrix
    from aclarena.store import load_manifest

    manifest = load_manifest(run_dir)
    out: dict[str, dict[str, Any]] = {}
    with open_matrix(run_dir, manifest) as (reader, _):
        for suite in suites:
            try:
                pairs, _settings, n, _made_from, wrong_both = flip_items(reader, manifest, early, late, suite,
                                                                         played=False)
            except AclarenaError as e:
                out[suite] = {"error": str(e)}
                continue
            lost = sum(1 for _, kind in pairs if kind == FORGOT)
            gained = len(pairs) - lost
            before = np.r_[np.ones(lost, bool), np.zeros(gained, bool)]
            out[suite] = {"lost": lost, "gained": gained, "n": n, "p_drop": mcnemar_drop_pvalue(before, ~before)}
            chance = suite_chance(suite)
            if chance:
                # beside the counts: the flips guessing alone does not explain (arXiv 2510.17776)
                f, b = chance_adjusted(lost, gained, wrong_both, n, chance)
                # None where a checkpoint scores clearly below guessing (the know-or-guess model does not hold)
                out[suite] |= {"chance": chance, "lost_chance_adjusted": None if math.isnan(f) else f * n,
                               "gained_chance_adjusted": None if math.isnan(b) else b * n}
    return out



def imported_flips(run_dir: str | Path, early: str, late: str, suite: str) -> dict[str, Any]:
    """The flips of an imported suite (lm-eval per-sample scores), paired by document: counts, the exact
    McNemar p of a drop and the item ids each way. Nothing is replayed: the harness's prompts and
    scoring are not in the run (register the task as a JSONL suite to localize its flips)."""
    from aclarena.results.capability import open_matrix
    from aclarena.store import load_manifest

    res = paired_change(run_dir, early, late, [suite])[suite]
    if "error" in res:
        raise AclarenaError(res["error"])
    manifest = load_manifest(run_dir)
    with open_matrix(run_dir, manifest) as (reader, _):
        pairs = flip_items(reader, manifest, early, late, suite, played=False)[0]
    return {"early": early, "late": late, "suite": suite, "replayed": False, **res,
            "lost_items": [i for i, kind in pairs if kind == FORGOT],
            "gained_items": [i for i, kind in pairs if kind == GAINED]}



def imported_suite(run_dir: str | Path, early: str, suite: str) -> str | None:
    """The source a suite's cell of ``early`` was imported from (``lm-eval``), or None when it was
    played (or is not there: :func:`flips` then says what is missing)."""
    from aclarena.results.capability import open_matrix
    from aclarena.store import load_manifest

    manifest = load_manifest(run_dir)
    with open_matrix(run_dir, manifest) as (_, matrix):
        cell = matrix.get(manifest.resolve(early).name, suite)
    return cell.source if cell is not None and cell.source != "arena" else None
