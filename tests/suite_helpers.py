"""A JSONL suite of a checkpoint's own replies, registered in a run with `init --add` (the custom-suite and
plain-prompt tests): the prompts, the reply budget, and the setup they share."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path

PROMPTS = [f"what is the {w} number of the city" for w in ("first", "second", "third", "total", "sum", "result",
                                                           "price", "year", "name", "color", "river", "tower")]
MAX_NEW = 12


def add_reply_suite(cli: Callable[..., tuple[int, str, str]], run: Path, tasks: Path, prompts: Sequence[str],
                    replies: Sequence[str], toml_extra: str = "") -> None:
    """Write ``tasks`` (one exact-answer task per prompt, its answer the reply), register it as suite `mine` of
    domain math with ``MAX_NEW`` reply tokens, then add ``toml_extra`` to its table (the manifest's last)."""
    tasks.write_text("".join(json.dumps({"id": i, "prompt": p, "answer": r}) + "\n"
                             for i, (p, r) in enumerate(zip(prompts, replies, strict=False))))
    code, _, err = cli("init", "--run", str(run), "--add", "--suite", f"mine={tasks}",
                       "--suite-domain", "mine=math", "--suite-scorer", "mine=exact",
                       "--suite-max-new-tokens", f"mine={MAX_NEW}")
    assert code == 0, err
    toml = run / "aclarena.toml"
    toml.write_text(toml.read_text() + toml_extra)
