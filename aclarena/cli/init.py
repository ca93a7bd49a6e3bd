"""``aclarena-diag init``: write aclarena.toml for checkpoints trained elsewhere."""

from __future__ import annotations

import argparse
import json
import os
import re
from pathlib import Path

from aclarena.cli._common import add_verb, print_json, print_table
from aclarena.errors import AclarenaError, ManifestError
from aclarena.store.manifest import (
    MANIFEST_NAME,
    CheckpointSpec,
    Manifest,
    load_manifest,
    manifest_path,
    write_manifest,
)

FIELDS = ("kind", "domain", "phase", "parent", "on")


def register(sub: argparse._SubParsersAction) -> None:
    p = add_verb(
        sub,
        "init",
        help="write aclarena.toml for checkpoints trained elsewhere",
        description=(
            "Write the run manifest from NAME=PATH pairs or from a folder of checkpoints. Kinds, domains and "
            "lineage are guessed from names (base, seq-<domain>, oracle-<domain>; a stage's parent is the "
            "stage before it) and can be set with NAME=VALUE options. Check the result with `checkpoints`."
        ),
        examples=(
            "aclarena-diag init --run runs/mine base=Qwen/Qwen3-8B-Base seq-math=ckpts/math seq-search=ckpts/search",
            "aclarena-diag init --run runs/mine --from-folder ckpts --phase seq-math=rl --phase seq-search=sft",
            "aclarena-diag init --run runs/mine --add mle-math=adapters/math --on mle-math=sdft --kind mle-math=consolidated",
        ),
    )
    p.add_argument("pairs", nargs="*", metavar="NAME=PATH", help="checkpoints, in training order")
    p.add_argument("--from-folder", metavar="DIR", help="add every checkpoint folder found under DIR")
    for f in FIELDS:
        p.add_argument(f"--{f}", action="append", default=[], metavar="NAME=VALUE", help=f"set `{f}` of checkpoint NAME")
    p.add_argument("--run-name", help="[run] name (default: the folder name)")
    p.add_argument("--base", help="the checkpoint task vectors start from (default: the one of kind base)")
    p.add_argument("--add", action="store_true", help="add to an existing manifest")
    p.add_argument("--force", action="store_true", help="overwrite an existing manifest")
    p.set_defaults(func=run)


def _split(pair: str, what: str) -> tuple[str, str]:
    if "=" not in pair:
        raise AclarenaError(f"{what} {pair!r} is not NAME=VALUE; write e.g. seq-math=checkpoints/seq-math")
    name, value = pair.split("=", 1)
    if not name or not value:
        raise AclarenaError(f"{what} {pair!r} has an empty name or value")
    return name.strip(), value.strip()


def _natural_key(s: str) -> list[object]:
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", s)]


def _guess(names: list[str], existing: Manifest) -> dict[str, dict[str, str]]:
    """Kind, domain and parent guessed from names; explicit options override them."""
    guesses: dict[str, dict[str, str]] = {}
    base = existing.base or next((n for n in names if n == "base" or n.startswith("base")), None)
    prev_stage = next((s.name for s in reversed(list(existing)) if s.kind == "stage"), None)
    for n in names:
        g: dict[str, str] = {}
        m = re.match(r"^(seq|stage|oracle)[-_](.+)$", n)
        if n == base:
            g["kind"] = "base"
        elif m and m.group(1) == "oracle":
            g.update(kind="oracle", domain=m.group(2))
            if base:
                g["parent"] = base
        else:
            g["kind"] = "stage"
            if m:
                g["domain"] = m.group(2)
            parent = prev_stage or base
            if parent:
                g["parent"] = parent
            prev_stage = n
        guesses[n] = g
    return guesses


def run(args: argparse.Namespace) -> int:
    run_dir = Path(args.run)
    exists = manifest_path(run_dir).is_file()
    if exists and not (args.add or args.force):
        raise ManifestError(
            f"{manifest_path(run_dir)} already exists; pass --add to add checkpoints or --force to overwrite it"
        )
    manifest = load_manifest(run_dir) if exists and args.add else Manifest(name=args.run_name or run_dir.resolve().name)

    entries: list[tuple[str, str]] = [_split(p, "checkpoint") for p in args.pairs]
    if args.from_folder:
        from aclarena.models.checkpoint import find_checkpoint_folders

        root = Path(args.from_folder)
        if not root.is_dir():
            raise AclarenaError(f"--from-folder {root} is not a folder")
        found = sorted(find_checkpoint_folders(root), key=lambda p: _natural_key(p.name))
        if not found:
            raise AclarenaError(f"no checkpoint folders (config.json with weights, or adapter_config.json) under {root}")
        for folder in found:
            rel = os.path.relpath(folder.resolve(), run_dir.resolve())
            entries.append((folder.name, rel if not rel.startswith("..") else str(folder.resolve())))
    if not entries:
        raise AclarenaError("nothing to add: give NAME=PATH pairs or --from-folder DIR")

    names = [n for n, _ in entries]
    dupes = sorted({n for n in names if names.count(n) > 1} | {n for n in names if n in manifest})
    if dupes:
        raise ManifestError(f"checkpoint name {dupes[0]!r} is given twice; names must be unique")

    explicit: dict[str, dict[str, str]] = {n: {} for n in names}
    for f in FIELDS:
        for pair in getattr(args, f):
            name, value = _split(pair, f"--{f}")
            if name not in explicit:
                raise AclarenaError(f"--{f} {pair}: {name!r} is not among the checkpoints being added ({', '.join(names)})")
            explicit[name][f] = value

    guesses = _guess(names, manifest)
    for name, path in entries:
        fields = {**guesses[name], **explicit[name]}
        if (run_dir / path).joinpath("adapter_config.json").is_file() and "on" not in fields:
            fields["on"] = _adapter_base(run_dir / path, manifest, entries, run_dir) or manifest.base or names[0]
        manifest.add(CheckpointSpec(name=name, path=path, **fields))
    if args.base:
        manifest.base = args.base
    elif manifest.base is None:
        bases = [s.name for s in manifest if s.kind == "base"]
        manifest.base = bases[0] if bases else None
    manifest.validate()
    run_dir.mkdir(parents=True, exist_ok=True)
    path = write_manifest(manifest, run_dir)

    rows = [s.to_dict() | {"name": s.name} for s in manifest]
    if args.json:
        print_json({"manifest": str(path), "run": manifest.name, "base": manifest.base, "checkpoints": rows})
    else:
        print_table(rows, ["name", "kind", "domain", "phase", "parent", "on", "path"], title=f"{MANIFEST_NAME} written to {path}",
                    caption="guessed fields can be changed with --kind/--domain/--phase/--parent/--on NAME=VALUE")
    return 0


def _adapter_base(folder: Path, manifest: Manifest, entries: list[tuple[str, str]], run_dir: Path) -> str | None:
    """The checkpoint whose path equals the adapter's base_model_name_or_path, if any."""
    try:
        base_path = json.loads((folder / "adapter_config.json").read_text()).get("base_model_name_or_path")
    except (OSError, json.JSONDecodeError, UnicodeDecodeError, RecursionError, AttributeError):
        return None
    if not isinstance(base_path, str) or not base_path:
        return None
    candidates = [(s.name, s.path) for s in manifest] + entries
    for name, path in candidates:
        if path == base_path or (run_dir / path).resolve() == Path(base_path).resolve():
            return name
    return None
