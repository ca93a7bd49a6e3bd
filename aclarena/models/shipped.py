"""The mini arena's pretrained base, shipped inside the package (``aclarena/models/mini_base/``).

The study post-trains a pretrained base (Qwen3-8B-Base); the mini arena does the same with a
small Qwen3 pretrained once by ``aclarena-diag train --config examples/mini-base.toml`` and
copied here with ``python -m aclarena.models.shipped <checkpoint folder>``. Every file of the
folder is recorded with its SHA-256 in ``fingerprint.json``; :func:`shipped_base` checks them
before anything trains from it, so a missing or modified file is one line naming the file and
the rebuild command, never a silent retraining. The model card (``README.md``) says how it was
made and what it scores.

Usage::

    python -m aclarena.models.shipped runs/mini-base/checkpoints/base   # ship a newly built base
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

from aclarena.errors import CheckpointError

SHIPPED_DIR = Path(__file__).with_name("mini_base")
FINGERPRINT_FILE = "fingerprint.json"
CARD_FILE = "README.md"
REBUILD_CONFIG = "examples/mini-base.toml"
REBUILD_COMMAND = f"aclarena-diag train --config {REBUILD_CONFIG} --out runs/mini-base"
# what a checkpoint folder of `train` holds that the shipped base keeps (its log included: a run that
# starts from the shipped base records the base's pretraining like a base it built)
SHIP_FILES = ("config.json", "generation_config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
              "chat_template.jinja", "special_tokens_map.json", "train_log.json")


def sha256(path: str | os.PathLike[str]) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def combined(files: dict[str, str]) -> str:
    """One fingerprint (16 hex digits) for a set of ``{file: sha256}``."""
    return hashlib.sha256(json.dumps(files, sort_keys=True).encode()).hexdigest()[:16]


def recorded(folder: str | os.PathLike[str] | None = None) -> dict[str, Any]:
    """The recorded fingerprint of a shipped base: ``{"fingerprint", "files": {name: sha256}, ...}``."""
    path = Path(folder if folder is not None else SHIPPED_DIR) / FINGERPRINT_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        files = data["files"]
        if not isinstance(files, dict) or not files or not isinstance(data["fingerprint"], str):
            raise ValueError
    except (OSError, ValueError, KeyError, TypeError):
        raise CheckpointError(f"the shipped mini base has no readable {path}; reinstall aclarena, or rebuild the base "
                              f"with `{REBUILD_COMMAND}` (or set [base] rebuild = true)") from None
    return data


def shipped_base(folder: str | os.PathLike[str] | None = None) -> Path:
    """The shipped base's folder, after checking every file against ``fingerprint.json``.

    Raises:
        CheckpointError: one line naming the missing or modified file and the rebuild command.
    """
    folder = Path(folder if folder is not None else SHIPPED_DIR)
    rec = recorded(folder)
    for name, digest in sorted(rec["files"].items()):
        path = folder / name
        if not path.is_file():
            raise CheckpointError(f"the shipped mini base is missing {path}; reinstall aclarena, or rebuild the base "
                                  f"with `{REBUILD_COMMAND}` (or set [base] rebuild = true)")
        if sha256(path) != digest:
            raise CheckpointError(f"the shipped mini base file {path} does not match its recorded fingerprint "
                                  f"(modified or corrupt); reinstall aclarena, or rebuild the base with "
                                  f"`{REBUILD_COMMAND}` (or set [base] rebuild = true)")
    if combined(rec["files"]) != rec["fingerprint"]:
        raise CheckpointError(f"{folder / FINGERPRINT_FILE} is inconsistent (its fingerprint is not that of its files); "
                              f"reinstall aclarena, or rebuild the base with `{REBUILD_COMMAND}`")
    return folder


def ship(src: str | os.PathLike[str], dest: str | os.PathLike[str] | None = None) -> dict[str, Any]:
    """Copy a base checkpoint folder of ``train`` into ``dest`` and record its fingerprint.

    The model card (``README.md`` in ``dest``) is kept if present (it is written by hand from the
    measured numbers); its fingerprint line must be updated to the returned value.
    """
    src, dest = Path(src), Path(dest if dest is not None else SHIPPED_DIR)
    if not (src / "model.safetensors").is_file():
        raise CheckpointError(f"{src} has no model.safetensors; name the base folder of a finished "
                              f"`{REBUILD_COMMAND}` run (runs/mini-base/checkpoints/base)")
    dest.mkdir(parents=True, exist_ok=True)
    for old in dest.iterdir():
        if old.name not in (CARD_FILE, "__init__.py") and old.is_file():
            old.unlink()
    files = {}
    for name in SHIP_FILES:
        if (src / name).is_file():
            shutil.copyfile(src / name, dest / name)
            files[name] = sha256(dest / name)
    marker = json.loads((src / ".aclarena-phase.json").read_text(encoding="utf-8")) \
        if (src / ".aclarena-phase.json").is_file() else {}
    data = {"fingerprint": combined(files), "files": files, "command": REBUILD_COMMAND,
            "seed": marker.get("meta", {}).get("seed"), "steps": marker.get("steps"), "time_s": marker.get("time_s"),
            "meta": marker.get("meta", {})}
    (dest / FINGERPRINT_FILE).write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    return data


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m aclarena.models.shipped <base checkpoint folder, e.g. runs/mini-base/checkpoints/base>",
              file=sys.stderr)
        return 2
    try:
        data = ship(args[0])
    except (CheckpointError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"shipped {args[0]} into {SHIPPED_DIR}: fingerprint {data['fingerprint']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
