"""``aclarena-diag init``: write aclarena.toml for checkpoints trained elsewhere."""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

from aclarena.cli._common import add_verb, print_json, print_table
from aclarena.errors import AclarenaError, ManifestError
from aclarena.store.manifest import (
    MANIFEST_NAME,
    CheckpointSpec,
    Manifest,
    SuiteSpec,
    load_manifest,
    manifest_path,
)
from aclarena.store.runlock import write_manifest_unless_changed

FIELDS = ("kind", "domain", "phase", "parent", "on")


def register(sub: argparse._SubParsersAction) -> None:
    p = add_verb(
        sub,
        "init",
        help="write aclarena.toml for checkpoints trained elsewhere",
        description=(
            "Write the run manifest from NAME=PATH pairs or from a folder of checkpoints. Kinds, domains and "
            "lineage are guessed from names (base, seq-<domain>, oracle-<domain>; a stage's parent is the "
            "stage before it) and can be set with NAME=VALUE options; each guessed domain is named in a note "
            "on stderr. A LoRA adapter's `on` is the checkpoint its adapter_config.json names as base, and its "
            "parent defaults to that `on` (an explicit --parent that differs is refused: the adapter's update "
            "is measured from the weights it is applied to). A PATH that is neither a folder nor a hub id is "
            "refused unless --allow-missing. Every PATH given here (NAME=PATH, --from-folder, --suite) is read "
            "from the current folder and written to aclarena.toml relative to the run folder (absolute when "
            "outside it), where the manifest's own paths are read from. Check the result with `checkpoints`."
        ),
        examples=(
            "aclarena-diag init --run runs/mine base=Qwen/Qwen3-8B-Base seq-math=ckpts/math seq-search=ckpts/search",
            "aclarena-diag init --run runs/mine --from-folder ckpts --phase seq-math=rl --phase seq-search=sft",
            "aclarena-diag init --run runs/mine --add mle-math=adapters/math --on mle-math=sdft --kind mle-math=consolidated",
            "aclarena-diag init --run runs/real base=models/smollm2 stage-1=ckpts/sft stage-2=ckpts/rl "
            "--domain stage-1=math --domain stage-2=math",
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
    p.add_argument("--suite", action="append", default=[], metavar="NAME=FILE.jsonl",
                   help="register an eval suite of your own: a JSONL task file (messages or prompt, answer); "
                        "written as [suites.NAME] (docs/custom-suites.md); repeatable")
    p.add_argument("--suite-domain", action="append", default=[], metavar="NAME=DOMAIN",
                   help="the domain suite NAME measures (required for each --suite; a stage's domain)")
    p.add_argument("--suite-role", action="append", default=[], metavar="NAME=ROLE",
                   help="id (default), ood or general")
    p.add_argument("--suite-scorer", action="append", default=[], metavar="NAME=SCORER",
                   help="exact, normalized (default), regex, numeric or package.module:function")
    p.add_argument("--suite-fewshot", action="append", default=[], metavar="NAME=FILE.jsonl",
                   help="the suite's few-shot examples: a JSONL file of solved tasks put before every task")
    p.add_argument("--suite-num-fewshot", action="append", default=[], metavar="NAME=K",
                   help="how many of those examples, in file order (default: all)")
    p.add_argument("--suite-max-new-tokens", action="append", default=[], metavar="NAME=N",
                   help="tokens generated per reply (default 256)")
    p.add_argument("--suite-prompt-format", action="append", default=[], metavar="NAME=FORMAT",
                   help="chat or plain for every checkpoint on the suite (default: each checkpoint's own)")
    p.add_argument("--allow-missing", action="store_true",
                   help="accept PATHs that do not exist yet (folders still to be copied or trained)")
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


def run(args: argparse.Namespace) -> int:  # noqa: C901
    run_dir = Path(args.run)
    exists = manifest_path(run_dir).is_file()
    if exists and not (args.add or args.force):
        raise ManifestError(
            f"{manifest_path(run_dir)} already exists; pass --add to add checkpoints or --force to overwrite it"
        )
    manifest = load_manifest(run_dir) if exists and args.add else Manifest(name=args.run_name or run_dir.resolve().name)
    read_text = manifest_path(run_dir).read_bytes() if exists and args.add else None

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
            entries.append((folder.name, _manifest_path(folder, run_dir)))
    suites = _suites(args, run_dir, manifest)
    if not entries and not suites:
        raise AclarenaError("nothing to add: give NAME=PATH pairs, --from-folder DIR or --suite NAME=FILE.jsonl")

    names = [n for n, _ in entries]
    dupes = sorted({n for n in names if names.count(n) > 1} | {n for n in names if n in manifest})
    if dupes:
        raise ManifestError(f"checkpoint name {dupes[0]!r} is given twice; names must be unique")
    # the NAME=PATH pairs come first; --from-folder's entries are written relative to the run folder already
    n_pairs = len(args.pairs)
    entries = [(n, _from_here(n, p, run_dir, allow_missing=args.allow_missing)) if i < n_pairs else (n, p)
               for i, (n, p) in enumerate(entries)]

    explicit: dict[str, dict[str, str]] = {n: {} for n in names}
    for f in FIELDS:
        for pair in getattr(args, f):
            name, value = _split(pair, f"--{f}")
            if name not in explicit:
                raise AclarenaError(f"--{f} {pair}: {name!r} is not among the checkpoints being added ({', '.join(names)})")
            explicit[name][f] = value

    notes: list[str] = []
    for name, path in entries:
        source = _require_present(name, path, run_dir, allow_missing=args.allow_missing)
        if source == "hub":
            notes.append(f"{name}: {path} is no local folder; taken as a hub id")
        elif source == "hub-uncached":
            notes.append(f"{name}: {path} is no local folder; taken as a hub id, not in the local Hugging Face "
                         f"cache yet: `hf download {path}` before the run is used")
    guesses = _guess(names, manifest)
    for name, path in entries:
        fields: dict[str, Any] = {**guesses[name], **explicit[name]}  # CheckpointSpec's keywords (str values)
        if "domain" in guesses[name] and "domain" not in explicit[name]:
            notes.append(f"{name}: domain {fields['domain']!r} guessed from the name; set it with "
                         f"--domain {name}=DOMAIN")
        if _local(run_dir, path).joinpath("adapter_config.json").is_file():
            if "on" not in fields:
                adapter_base = _adapter_base(_local(run_dir, path), manifest, entries, run_dir)
                fields["on"] = adapter_base or manifest.base or names[0]
                if adapter_base is None:
                    notes.append(f"{name}: adapter applied on {fields['on']!r} (its adapter_config.json names no "
                                 f"checkpoint of the run); set it with --on {name}=NAME")
            _adapter_parent(name, fields, explicit[name])
        manifest.add(CheckpointSpec(name=name, path=path, **fields))
    if suites:
        from aclarena.envs.custom import register_suites

        manifest.suites.update(suites)
        register_suites(manifest, run_dir)  # every file read and checked now, before the manifest is written
    if args.base:
        manifest.base = args.base
    elif manifest.base is None:
        bases = [s.name for s in manifest if s.kind == "base"]
        manifest.base = bases[0] if bases else None
    manifest.validate()
    run_dir.mkdir(parents=True, exist_ok=True)
    written = write_manifest_unless_changed(manifest, run_dir, read_text)

    rows = [s.to_dict() | {"name": s.name} for s in manifest]
    suite_rows = [s.to_dict() | {"name": s.name} for s in manifest.suites.values()]
    for note in notes:
        print(f"aclarena-diag init: note: {note}", file=sys.stderr)
    if args.json:
        print_json({"manifest": str(written), "run": manifest.name, "base": manifest.base, "checkpoints": rows,
                    "suites": suite_rows})
    else:
        print_table(rows, ["name", "kind", "domain", "phase", "parent", "on", "path"], title=f"{MANIFEST_NAME} written to {written}",
                    caption="guessed fields can be changed with --kind/--domain/--phase/--parent/--on NAME=VALUE")
        if suite_rows:
            print_table(suite_rows, ["name", "domain", "role", "scorer", "path"], title="eval suites")
    return 0


#: the suite fields init sets per suite: (option, SuiteSpec field, how the value is read)
SUITE_FIELDS = (("suite_domain", "domain", str), ("suite_role", "role", str), ("suite_scorer", "scorer", str),
                ("suite_fewshot", "fewshot", Path), ("suite_num_fewshot", "num_fewshot", int),
                ("suite_max_new_tokens", "max_new_tokens", int), ("suite_prompt_format", "prompt_format", str))


def _suites(args: argparse.Namespace, run_dir: Path, manifest: Manifest) -> dict[str, SuiteSpec]:
    """The suites of --suite NAME=FILE, with their --suite-domain/-role/-scorer/-fewshot/... fields."""
    out: dict[str, dict[str, Any]] = {}  # SuiteSpec's keywords
    for pair in args.suite:
        name, file = _split(pair, "--suite")
        if name in out or name in manifest.suites:
            raise ManifestError(f"suite name {name!r} is given twice; names must be unique")
        out[name] = {"path": _manifest_path(Path(file).expanduser(), run_dir)}
    for option, key, kind in SUITE_FIELDS:
        flag = f"--{option.replace('_', '-')}"
        for pair in getattr(args, option):
            name, value = _split(pair, flag)
            if name not in out:
                raise AclarenaError(f"{flag} {pair}: {name!r} is not among the suites being "
                                    f"added ({', '.join(out) or 'none; add one with --suite NAME=FILE.jsonl'})")
            if kind is int:
                try:
                    out[name][key] = int(value)
                except ValueError:
                    raise AclarenaError(f"{flag} {pair}: {value!r} is not an integer") from None
            elif kind is Path:  # read from here, written relative to the run folder (as --suite's file)
                out[name][key] = _manifest_path(Path(value).expanduser(), run_dir)
            else:
                out[name][key] = value
    for name, fields in out.items():
        if "domain" not in fields:
            raise AclarenaError(f"suite {name!r} needs the domain it measures: add --suite-domain {name}=DOMAIN (the "
                                "domain of the stage that trains it)")
    return {name: SuiteSpec(name=name, **fields) for name, fields in out.items()}


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


def _manifest_path(target: Path, run_dir: Path) -> str:
    """How aclarena.toml names ``target``: relative to the run folder when inside it, else absolute."""
    rel = os.path.relpath(target.resolve(), run_dir.resolve())
    return rel if not rel.startswith("..") else str(target.resolve())


def _from_here(name: str, path: str, run_dir: Path, *, allow_missing: bool) -> str:
    """The one rule for paths on init's command line (NAME=PATH, --from-folder, --suite): a relative PATH is
    read from the current folder, as by any command, and written to aclarena.toml relative to the run folder
    (absolute when outside it), where the manifest's paths are read from. A hub id (``org/name`` whose
    ``org`` is no folder here) stays as it is."""
    from aclarena.models.files import HUB_ID_RE

    raw = os.path.expanduser(path)
    if os.path.isabs(raw):
        return path
    here = Path(raw)
    org = path.split("/")[0]
    hub = bool(HUB_ID_RE.match(path)) and not Path(org).exists() and not (run_dir / org).exists()
    if here.exists() or (allow_missing and not hub):
        return _manifest_path(here, run_dir)
    if hub:
        return path
    hint = (f" ({run_dir / raw} exists: a PATH is read from the current folder, not the run folder; give "
            f"{name}={run_dir / raw})" if (run_dir / raw).exists() else "")
    raise AclarenaError(f"{name}={path}: {here.resolve()} does not exist{hint}; fix the path, or pass --allow-missing "
                        "if it will be there before the run is used")


def _local(run_dir: Path, path: str) -> Path:
    raw = os.path.expanduser(path)
    return Path(raw) if os.path.isabs(raw) else run_dir / raw


def _require_present(name: str, path: str, run_dir: Path, *, allow_missing: bool) -> str | None:
    """The source PATH names (folder, adapter, hub, hub-uncached); a PATH that names no folder and no hub id
    (``org/name``, whose first part is no local folder) is refused unless ``allow_missing``."""
    from aclarena.errors import CheckpointError
    from aclarena.models.checkpoint import locate
    from aclarena.models.files import HUB_ID_RE

    try:
        return locate(CheckpointSpec(name=name, path=path), run_dir)[0]
    except CheckpointError:
        if allow_missing:
            return None
        where = _local(run_dir, path)
        if HUB_ID_RE.match(path) and not (run_dir / path.split("/")[0]).exists():
            return "hub-uncached"  # loaders refuse it, in one line, until it is downloaded
        if where.is_file():
            hint = ("; a .gguf file is imported first: aclarena-diag import" if where.suffix == ".gguf"
                    else "; give its folder")
            raise AclarenaError(f"{name}={path}: {where} is a file, not a checkpoint folder{hint}") from None
        raise AclarenaError(f"{name}={path}: {where} does not exist; fix the path, or pass --allow-missing if it "
                            "will be there before the run is used") from None


def _adapter_parent(name: str, fields: dict[str, str], explicit: dict[str, str]) -> None:
    """An adapter's update is measured from the weights it is applied to: its parent is its `on`."""
    if "parent" in explicit and explicit["parent"] != fields["on"]:
        raise AclarenaError(f"--parent {name}={explicit['parent']} disagrees with the adapter's base "
                            f"{fields['on']!r} (`on`): an adapter's parent is the checkpoint it is applied on; "
                            f"drop --parent {name}=... or set --on {name}={explicit['parent']}")
    fields["parent"] = fields["on"]
