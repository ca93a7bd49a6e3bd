"""Inputs are fingerprinted where results depend on them and checked before a result is reused: an edited
suite file, a probe set whose reference weights changed, a later checkpoint without tokenizer files, a zero update.

Each test failed on the code before its fix (issue 43, checked against its branch at 3c35d94)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from reliability_helpers import one_line


def test_flips_refuses_cells_of_an_edited_suite_file(fixture_run, tmp_path, cli):
    """The cells record the custom suite file's SHA-256; before, `flips` replayed today's tasks against the
    outcomes of the file as it was."""
    import json

    from flips_helpers import CELL_SETTINGS, OUTCOMES

    from aclarena.envs import sample_tasks
    from aclarena.envs.custom import register_suites
    from aclarena.envs.evaluation import suite_settings
    from aclarena.results.capability import cell_payload, write_cells
    from aclarena.store import Manifest, load_manifest

    tasks = tmp_path / "mine.jsonl"
    tasks.write_text("".join(json.dumps({"id": i, "prompt": f"say {i}", "answer": str(i)}) + "\n" for i in range(4)))
    code, _, err = cli("init", "--run", str(fixture_run), "--add", "--suite", f"mine={tasks}",
                       "--suite-domain", "mine=math", "--suite-scorer", "mine=exact")
    assert code == 0, err
    try:
        register_suites(load_manifest(fixture_run), fixture_run)
        settings = suite_settings(CELL_SETTINGS, "mine")
        ids = [t.id for t in sample_tasks("mine", 4, seed=0)]
        items = []
        for ck, o in OUTCOMES.items():
            items.append(cell_payload(checkpoint=ck, suite="mine", domain="math", role="id", source="arena",
                                      settings=settings, greedy=np.array([o], dtype=float), item_ids=ids))
        write_cells(fixture_run, items)
    finally:
        register_suites(Manifest(name="none"), ".")
    tasks.write_text(tasks.read_text().replace('"say 1"', '"say one hundred"'))  # same ids, other tasks
    code, _, err = cli("flips", "--from", "seq-math", "--to", "seq-search", "--suite", "mine", "--no-swap",
                       "--run", str(fixture_run))
    register_suites(Manifest(name="none"), ".")
    assert code == 1, err
    line = one_line(err, "flips")
    assert "task file has changed" in line and "eval --suites mine" in line


PROMPTS = '{"prompt": "what is 3 + 4?"}\n{"prompt": "the total is"}\n'


def _probe(run: Path, tmp_path: Path, cli) -> None:
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(PROMPTS)
    code, _, err = cli("probe", "--ref", "seq-math", "--prompts", str(prompts), "--max-new-tokens", "4",
                       "--run", str(run))
    assert code == 0, err


def test_tokens_refuses_a_probe_set_whose_reference_weights_changed(fixture_run, tmp_path, cli):
    """Before, `tokens` rescored every checkpoint on generations the reference's current weights never made."""
    from fixtures import perturb
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from aclarena.models.tiny import save_checkpoint

    _probe(fixture_run, tmp_path, cli)
    folder = fixture_run / "checkpoints" / "seq-math"
    tok = AutoTokenizer.from_pretrained(folder)
    save_checkpoint(perturb(AutoModelForCausalLM.from_pretrained(folder), 0.05, seed=5), tok, folder)
    code, _, err = cli("tokens", "--ref", "seq-math", "--against", "seq-search", "--run", str(fixture_run))
    assert code == 1, err
    line = one_line(err, "tokens")
    assert "have changed since" in line and "probe --ref seq-math --force" in line


def test_tokens_names_a_later_checkpoint_without_tokenizer_files(fixture_run, tmp_path, cli):
    _probe(fixture_run, tmp_path, cli)
    for f in (fixture_run / "checkpoints" / "seq-search").iterdir():
        if f.name.startswith(("tokenizer", "special_tokens", "vocab", "merges", "chat_template")):
            f.unlink()
    code, _, err = cli("tokens", "--ref", "seq-math", "--against", "seq-search", "--run", str(fixture_run))
    assert code == 0, err
    assert "'seq-search' has no tokenizer files" in err


def test_vectors_notes_a_zero_update(fixture_run, cli):
    from tokens_helpers import copy_checkpoint

    copy_checkpoint(fixture_run, "seq-math", "seq-math-again", parent="seq-math")
    code, out, err = cli("vectors", "--run", str(fixture_run))
    assert code == 0, err
    assert "seq-math-again - seq-math is a zero update" in out and "nan" in out
