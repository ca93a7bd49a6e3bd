"""What an evaluation cell's items were: the prompt each item showed and the answer expected of it.

A capability cell stores its items' ids (``<env>/<variant>/<hash>``), outcomes and replies
(transcripts), not the tasks: the tasks are regenerated here from the suite, ``-n`` and the
seeds the cell was scored with (task generation is deterministic per seed), so the dashboard's
Overview can show prompt, reply and expected answer side by side. ``aclarena-diag dashboard``
passes :func:`describe_items` to the app (the dashboard layer does not import the arena).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any


def describe_items(run_dir: str | os.PathLike[str], suite: str, settings: Mapping[str, Any],
                   ids: Sequence[str]) -> dict[str, dict[str, str]]:
    """``{item id: {"prompt", "expected"}}`` for the ids found among the suite's tasks of the cell's
    seeds (``settings``: the cell's ``n`` and ``seeds``); ids not regenerated (a changed arena, a custom
    suite's file that moved) are left out. ``expected`` is the expert's reply (its answer line last)."""
    from aclarena.envs import get_env, sample_tasks
    from aclarena.envs.custom import register_suites
    from aclarena.errors import AclarenaError
    from aclarena.store.manifest import load_manifest

    want = {str(i) for i in ids}
    out: dict[str, dict[str, str]] = {}
    try:
        n = int(settings["n"])
        seeds = [int(s) for s in settings.get("seeds") or [0]]
        manifest = load_manifest(Path(run_dir))
        if manifest.suites:
            register_suites(manifest, run_dir)
    except (AclarenaError, KeyError, TypeError, ValueError):
        return out
    for seed in seeds:
        try:
            tasks = sample_tasks(suite, n, seed=seed, split="eval")
        except (AclarenaError, KeyError, ValueError):
            return out
        for t in tasks:
            if t.id not in want or t.id in out:
                continue
            try:
                expected = "\n".join(get_env(t.env).expert_actions(t))
            except (AclarenaError, KeyError, NotImplementedError, ValueError):
                expected = ""
            out[t.id] = {"prompt": t.prompt, "expected": expected}
        if len(out) == len(want):
            break
    return out
