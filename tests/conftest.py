"""Session fixtures: a tokenizer trained locally, tiny Qwen3 and Llama models, a run folder.

Everything is built from configs on the CPU; nothing is downloaded.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
# No progress lines on a piped stderr (aclarena.progress): the bad-input tests read exactly one line there.
# tests/integration/test_progress_logs.py turns them on and checks them.
os.environ.setdefault("ACLARENA_PROGRESS_INTERVAL", "0")

sys.path.insert(0, str(Path(__file__).parent))

# the kernels aclarena-diag pins (aclarena.reproducibility), so in-process runs match CLI subprocesses
from aclarena.reproducibility import pin_cpu_kernels  # noqa: E402

pin_cpu_kernels()

from fixtures import make_run, make_tokenizer  # noqa: E402


@pytest.fixture(scope="session")
def tokenizer():
    return make_tokenizer()


@pytest.fixture(scope="session")
def _run_template(tmp_path_factory, tokenizer) -> Path:
    return make_run(tmp_path_factory.mktemp("run-template") / "run", tokenizer)


@pytest.fixture()
def fixture_run(_run_template, tmp_path) -> Path:
    """A fresh copy of the fixture run folder (base, seq-math, seq-search, oracle-math, lora-ecom)."""
    dst = tmp_path / "run"
    shutil.copytree(_run_template, dst)
    return dst


@pytest.fixture(scope="session")
def llama_run(tmp_path_factory, tokenizer) -> Path:
    """The same layout with Llama models (proves nothing is Qwen-specific). Do not modify."""
    return make_run(tmp_path_factory.mktemp("llama") / "run", tokenizer, arch="llama", lora=False)


def run_cli(*argv: str) -> tuple[int, str, str]:
    """Run ``aclarena-diag`` in-process; returns (exit code, stdout, stderr)."""
    import contextlib
    import io

    from aclarena.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(argv))
        except SystemExit as e:  # argparse usage errors
            code = int(e.code or 0)
    return code, out.getvalue(), err.getvalue()


@pytest.fixture()
def cli():
    return run_cli


@pytest.fixture(scope="session")
def tiny_curriculum(tmp_path_factory) -> tuple[Path, object]:
    """examples/tiny.toml trained once per session: (run folder, CurriculumResult).

    Shared by the training and consolidation tests; tests must not modify it (copy it first).
    """
    from train_helpers import TINY

    from aclarena.train.config import load_config
    from aclarena.train.curriculum import run_curriculum

    out = tmp_path_factory.mktemp("tiny-curriculum") / "run"
    result = run_curriculum(load_config(TINY), out, show_progress=False, config_text=TINY.read_text())
    return out, result
