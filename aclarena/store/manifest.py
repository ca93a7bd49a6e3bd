"""The run manifest, ``aclarena.toml``: which checkpoints a run holds and how they descend.

A run is a folder with ``aclarena.toml`` and ``results.h5``. The manifest names every
checkpoint once; those names are the handles every verb takes (``--ref seq-math``), and
they are resolved here and nowhere else.

Format (docs/manifest.md)::

    [run]
    name = "mini"
    base = "base"

    [checkpoints.seq-math]
    path = "checkpoints/seq-math"   # HF folder, hub id, or LoRA adapter folder (then `on`)
    kind = "stage"                  # base | stage | oracle | consolidated
    domain = "math"
    phase = "rl"                    # sft | rl
    parent = "base"

    [suites.qa]                     # a bring-your-own eval suite (aclarena.envs.custom)
    path = "tasks/qa.jsonl"
    domain = "search"
    scorer = "normalized"           # exact | normalized | regex | numeric | pkg.module:function
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
import tomllib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from aclarena.errors import AclarenaError, ManifestError, did_you_mean, unknown_name

MANIFEST_NAME = "aclarena.toml"
KINDS = ("base", "stage", "oracle", "consolidated")
PHASES = ("sft", "rl")
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*\Z")  # \Z, not $: "$" also matches before a final newline
RUN_KEYS = ("name", "base", "description")
PROMPT_FORMATS = ("chat", "plain")  # aclarena.models.chat: how a checkpoint is prompted (issue 45)


def _check_prompt_format(value: Any, where: str) -> None:
    if value is not None and value not in PROMPT_FORMATS:
        raise ManifestError(f"{where} has prompt_format {value!r}{did_you_mean(str(value), PROMPT_FORMATS)}; "
                            f"prompt_format must be one of {', '.join(PROMPT_FORMATS)} (leave it out to detect it "
                            "from the tokenizer: no chat template means plain)")


@dataclass(frozen=True, slots=True)
class CheckpointSpec:
    """One checkpoint of a run.

    Attributes:
        name: the handle verbs take (``seq-math``).
        path: an HF folder (relative to the run folder or absolute), a hub id, or a LoRA
            adapter folder; for an adapter, ``on`` names the checkpoint it applies to.
        kind: ``base``, ``stage``, ``oracle`` or ``consolidated``.
        domain: the capability this checkpoint was trained for (``math``, ``search``, ...).
        phase: ``sft`` or ``rl``, so that SFT and RL updates can be told apart.
        parent: the checkpoint this one was trained from.
        on: for a LoRA adapter, the checkpoint it is applied to.
        method: for consolidated models, how they were made (``mmopd``, ``merge-ties``...).
        seed: the training seed, when a run holds several.
        prompt_format: ``chat`` (its tokenizer's chat template) or ``plain`` (prompts as text, for base
            models); None: detected from the tokenizer (no chat template means plain).
    """

    name: str
    path: str
    kind: str = "stage"
    domain: str | None = None
    phase: str | None = None
    parent: str | None = None
    on: str | None = None
    method: str | None = None
    seed: int | None = None
    prompt_format: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not NAME_RE.match(self.name):
            raise ManifestError(
                f"checkpoint name {self.name!r} is not allowed; use letters, digits, '.', '_' and '-'"
            )
        if not isinstance(self.path, str) or not self.path:
            raise ManifestError(f"checkpoint {self.name!r} needs a non-empty `path`")
        if self.kind not in KINDS:
            raise ManifestError(
                f"checkpoint {self.name!r} has kind {self.kind!r}{did_you_mean(self.kind, KINDS)}; "
                f"kind must be one of {', '.join(KINDS)}"
            )
        if self.phase is not None and self.phase not in PHASES:
            raise ManifestError(
                f"checkpoint {self.name!r} has phase {self.phase!r}{did_you_mean(self.phase, PHASES)}; "
                f"phase must be one of {', '.join(PHASES)}"
            )
        for key in ("domain", "parent", "on", "method"):
            value = getattr(self, key)
            if value is not None and (not isinstance(value, str) or not value):
                raise ManifestError(f"checkpoint {self.name!r}: `{key}` must be a non-empty string")
        if self.seed is not None and (not isinstance(self.seed, int) or isinstance(self.seed, bool)):
            raise ManifestError(f"checkpoint {self.name!r}: `seed` must be an integer, got {self.seed!r}")
        _check_prompt_format(self.prompt_format, f"checkpoint {self.name!r}")
        if self.parent == self.name or self.on == self.name:
            raise ManifestError(f"checkpoint {self.name!r} names itself as parent or `on`; name another")

    @property
    def is_adapter(self) -> bool:
        return self.on is not None

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None}


SPEC_KEYS = tuple(f.name for f in fields(CheckpointSpec) if f.name != "name")
SCORERS = ("exact", "normalized", "regex", "numeric")
SUITE_ROLES = ("id", "ood", "general")
CALLABLE_RE = re.compile(r"[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*:[A-Za-z_][\w]*\Z")


@dataclass(frozen=True, slots=True)
class SuiteSpec:
    """A bring-your-own eval suite: a JSONL task file scored by one scorer (docs/custom-suites.md).

    Attributes:
        name: the handle ``eval --suites`` and ``flips --suite`` take.
        path: the JSONL file (relative to the run folder or absolute); one task per line with
            ``messages`` or ``prompt`` and ``answer``.
        domain: the capability the suite measures (a stage's ``domain``, for ``forgetting``).
        role: ``id`` (in-domain), ``ood`` or ``general``.
        scorer: ``exact``, ``normalized`` (lower case, no punctuation or articles), ``regex``
            (``answer`` is a pattern searched in the reply), ``numeric`` (the reply's last number),
            or a Python callable ``pkg.module:function`` (``eval --allow-code``).
        extract: a regular expression applied to the reply first; its first group (or the whole
            match) is what is scored.
        tolerance: ``numeric``: the largest accepted absolute difference (default 1e-6 relative).
        max_new_tokens: tokens generated per reply (default 256).
        system: a system prompt put before every task that has none (default: none, so the
            model's chat template adds its own default, if it has one).
        chance: the score of guessing (a multiple-choice suite: one over its options), default 0.
        prompt_format: ``chat`` or ``plain`` for every checkpoint evaluated on it (a checkpoint's own
            ``prompt_format`` comes first); None: each checkpoint's (detected from its tokenizer).
        fewshot: the suite's few-shot split, a JSONL file of solved examples (lines as the task file's)
            put before every task: ``prompt answer`` blocks in the plain format, user/assistant
            turns in the chat format.
        num_fewshot: how many of its lines, in file order (default: all of them).
    """

    name: str
    path: str
    domain: str
    role: str = "id"
    scorer: str = "normalized"
    extract: str | None = None
    tolerance: float | None = None
    max_new_tokens: int | None = None
    system: str | None = None
    chance: float | None = None
    prompt_format: str | None = None
    fewshot: str | None = None
    num_fewshot: int | None = None

    def __post_init__(self) -> None:
        where = f"suite {self.name!r}"
        _check_prompt_format(self.prompt_format, where)
        if self.fewshot is not None and (not isinstance(self.fewshot, str) or not self.fewshot):
            raise ManifestError(f"{where}: `fewshot` must be the path of a JSONL file of examples")
        if self.num_fewshot is not None and (not isinstance(self.num_fewshot, int) or isinstance(self.num_fewshot, bool)
                                             or self.num_fewshot < 0 or self.fewshot is None):
            raise ManifestError(f"{where}: `num_fewshot` must be an integer >= 0 and goes with `fewshot` (the file of "
                                f"examples), got {self.num_fewshot!r}")
        if not isinstance(self.name, str) or not NAME_RE.match(self.name):
            raise ManifestError(f"suite name {self.name!r} is not allowed; use letters, digits, '.', '_' and '-'")
        for key in ("path", "domain"):
            value = getattr(self, key)
            if not isinstance(value, str) or not value:
                raise ManifestError(f"{where} needs a non-empty `{key}`")
        for key in ("extract", "system"):
            value = getattr(self, key)
            if value is not None and not isinstance(value, str):
                raise ManifestError(f"{where}: `{key}` must be a string")
        if self.role not in SUITE_ROLES:
            raise ManifestError(f"{where} has role {self.role!r}{did_you_mean(str(self.role), SUITE_ROLES)}; "
                                f"role must be one of {', '.join(SUITE_ROLES)}")
        if not isinstance(self.scorer, str) or not (self.scorer in SCORERS or CALLABLE_RE.match(self.scorer)):
            raise ManifestError(f"{where} has scorer {self.scorer!r}{did_you_mean(str(self.scorer), SCORERS)}; use "
                                f"{', '.join(SCORERS)} or a Python callable as package.module:function")
        if self.extract is not None:
            try:
                re.compile(self.extract)
            except re.error as e:
                raise ManifestError(f"{where}: `extract` {self.extract!r} is not a regular expression ({e})") from None
        if self.max_new_tokens is not None and (not isinstance(self.max_new_tokens, int)
                                                or isinstance(self.max_new_tokens, bool) or self.max_new_tokens < 1):
            raise ManifestError(f"{where}: `max_new_tokens` must be a positive integer, got {self.max_new_tokens!r}")
        for key, low, high in (("tolerance", 0.0, float("inf")), ("chance", 0.0, 1.0)):
            value = getattr(self, key)
            if value is not None and (not isinstance(value, int | float) or isinstance(value, bool)
                                      or not low <= value <= high):
                raise ManifestError(f"{where}: `{key}` must be a number in [{low:g}, {high:g}], got {value!r}")

    @property
    def is_callable(self) -> bool:
        return self.scorer not in SCORERS

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None}


SUITE_KEYS = tuple(f.name for f in fields(SuiteSpec) if f.name != "name")


@dataclass
class Manifest:
    """A run's checkpoints, in the order they were declared."""

    name: str = "run"
    base: str | None = None
    description: str | None = None
    checkpoints: dict[str, CheckpointSpec] = field(default_factory=dict)
    suites: dict[str, SuiteSpec] = field(default_factory=dict)

    # --- names -------------------------------------------------------------------------
    def resolve(self, name: str) -> CheckpointSpec:
        """The checkpoint called ``name``; unknown names fail with a did-you-mean."""
        try:
            return self.checkpoints[name]
        except KeyError:
            raise unknown_name("checkpoint", name, self.checkpoints,
                               hint=f"see `aclarena-diag checkpoints` or add it to {MANIFEST_NAME}") from None

    def resolve_many(self, names: str | list[str]) -> list[CheckpointSpec]:
        """Resolve a comma-separated string or a list of names, keeping their order."""
        if isinstance(names, str):
            names = [n.strip() for n in names.split(",") if n.strip()]
        return [self.resolve(n) for n in names]

    def __contains__(self, name: object) -> bool:
        return name in self.checkpoints

    def __iter__(self) -> Iterator[CheckpointSpec]:
        return iter(self.checkpoints.values())

    def __len__(self) -> int:
        return len(self.checkpoints)

    # --- lineage -----------------------------------------------------------------------
    def ancestors(self, name: str) -> list[str]:
        """Parents of ``name``, nearest first (its own name excluded)."""
        chain: list[str] = []
        spec = self.resolve(name)
        while spec.parent is not None:
            chain.append(spec.parent)
            spec = self.resolve(spec.parent)
        return chain

    def descendants(self, name: str) -> list[str]:
        """Every checkpoint that has ``name`` among its ancestors, in manifest order."""
        self.resolve(name)
        kids: dict[str, list[str]] = {}
        for s in self:
            if s.parent is not None:
                kids.setdefault(s.parent, []).append(s.name)
        below: set[str] = set()
        stack = [name]
        while stack:  # each checkpoint visited once: linear in the number of checkpoints
            for k in kids.get(stack.pop(), []):
                if k not in below:
                    below.add(k)
                    stack.append(k)
        return [s.name for s in self if s.name in below]

    def children(self, name: str) -> list[str]:
        return [s.name for s in self if s.parent == name]

    # --- editing -----------------------------------------------------------------------
    def add(self, spec: CheckpointSpec, *, replace_existing: bool = False) -> None:
        """Add a checkpoint; the whole manifest is validated again."""
        if spec.name in self.checkpoints and not replace_existing:
            raise ManifestError(f"checkpoint {spec.name!r} is already in the manifest; choose another name")
        previous = dict(self.checkpoints)
        self.checkpoints[spec.name] = spec
        try:
            self.validate()
        except ManifestError:
            self.checkpoints = previous
            raise

    def validate(self) -> None:
        """Check references and lineage: parents and `on` exist, no cycles, the base exists."""
        names = self.checkpoints
        if self.base is not None and self.base not in names:
            raise ManifestError(
                f"[run] base = {self.base!r} is not a checkpoint{did_you_mean(self.base, names)}; "
                f"known: {', '.join(names) or 'none'}"
            )
        for spec in self:
            for key in ("parent", "on"):
                ref = getattr(spec, key)
                if ref is not None and ref not in names:
                    raise ManifestError(
                        f"checkpoint {spec.name!r} has {key} = {ref!r}, which is not a checkpoint"
                        f"{did_you_mean(ref, names)}; known: {', '.join(names)}"
                    )
        _check_acyclic(names, "parent", "parent cycle in the manifest: {}; a checkpoint cannot descend from itself")
        _check_acyclic(names, "on", "adapter cycle in the manifest (`on`): {}")

    # --- serialisation -----------------------------------------------------------------
    def to_toml(self) -> str:
        lines = ["[run]"]
        for key in RUN_KEYS:
            value = getattr(self, key)
            if value is not None:
                lines.append(f"{key} = {_toml_value(value)}")
        for spec in self:
            lines.append("")
            lines.append(f"[checkpoints.{_toml_key(spec.name)}]")
            for key, value in spec.to_dict().items():
                if key != "name":
                    lines.append(f"{key} = {_toml_value(value)}")
        for suite in self.suites.values():
            lines.append("")
            lines.append(f"[suites.{_toml_key(suite.name)}]")
            for key, value in suite.to_dict().items():
                if key != "name":
                    lines.append(f"{key} = {_toml_value(value)}")
        return "\n".join(lines) + "\n"


def _check_acyclic(specs: Mapping[str, CheckpointSpec], key: str, message: str) -> None:
    """Refuse a cycle along ``key`` (each checkpoint names at most one): every checkpoint is walked
    once, so a chain of thousands of checkpoints is checked in linear time."""
    done: set[str] = set()
    for start in specs:
        if start in done:
            continue
        path: list[str] = []
        on_path: dict[str, int] = {}
        cur: str | None = start
        while cur is not None and cur not in done:
            if cur in on_path:
                cycle = " -> ".join([*path[on_path[cur]:], cur])
                raise ManifestError(message.format(cycle))
            on_path[cur] = len(path)
            path.append(cur)
            cur = getattr(specs[cur], key)
        done.update(path)


def parse_manifest(text: str, source: str = MANIFEST_NAME) -> Manifest:
    """Parse and validate manifest text; errors name ``source`` and, for TOML errors, the line."""
    return manifest_from_dict(read_toml(text, source, ManifestError), source)


def read_toml(text: str, source: str, error: type[AclarenaError] = ManifestError) -> dict[str, Any]:
    """The one reader of TOML files people write (the manifest, curriculum configs): a UTF-8 byte order mark at
    the start is accepted (Windows editors write one; tomllib called it "Invalid statement (line 1, column 1)"),
    and every failure is one ``error`` line naming ``source``: a TOML error with its line, and values nested so
    deeply that tomllib, which recurses once per level, runs out of stack (a RecursionError, exit 3, before)."""
    text = text.removeprefix("\ufeff")
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise error(f"{source} is not valid TOML: {e}; fix that line") from None
    except RecursionError:
        raise error(f"{source} nests arrays or inline tables too deeply to be read (hundreds of levels); "
                    "flatten them") from None


def manifest_from_dict(data: Mapping[str, Any], source: str = MANIFEST_NAME) -> Manifest:
    unknown = set(data) - {"run", "checkpoints", "suites"}
    if unknown:
        key = sorted(unknown)[0]
        raise ManifestError(
            f"{source}: unknown table [{key}]{did_you_mean(key, ['run', 'checkpoints', 'suites'])}; "
            "a manifest has [run], [checkpoints.NAME] and [suites.NAME] tables"
        )
    run = data.get("run", {})
    if not isinstance(run, Mapping):
        raise ManifestError(f"{source}: `run` must be a table ([run])")
    _known_keys(run, RUN_KEYS, "[run]", source)
    for key in run:
        if not isinstance(run[key], str):
            raise ManifestError(f"{source}: [run].{key} must be a string, got {run[key]!r}")
    checkpoints = data.get("checkpoints", {})
    if not isinstance(checkpoints, Mapping):
        raise ManifestError(f"{source}: `checkpoints` must be tables ([checkpoints.NAME])")
    manifest = Manifest(name=run.get("name", "run"), base=run.get("base"), description=run.get("description"))
    for name, entry in checkpoints.items():
        manifest.checkpoints[name] = _checkpoint_from(name, entry, source)
    if manifest.base is None:
        bases = [s.name for s in manifest if s.kind == "base"]
        if len(bases) == 1:
            manifest.base = bases[0]
    manifest.suites = _suites_from(data.get("suites", {}), source)
    manifest.validate()
    return manifest


def _known_keys(table: Mapping[str, Any], allowed: Sequence[str], where: str, source: str) -> None:
    for key in table:
        if key not in allowed:
            raise ManifestError(f"{source}: unknown key {where}.{key}{did_you_mean(key, allowed)}; "
                                f"allowed: {', '.join(allowed)}")


def _checkpoint_from(name: str, entry: Any, source: str) -> CheckpointSpec:
    if not isinstance(entry, Mapping):
        raise ManifestError(f"{source}: checkpoints.{name} must be a table with at least `path`")
    _known_keys(entry, SPEC_KEYS, f"checkpoints.{name}", source)
    if "path" not in entry:
        raise ManifestError(f"{source}: checkpoints.{name} has no `path`; add path = \"<folder or hub id>\"")
    for key, value in entry.items():
        if key != "seed" and not isinstance(value, str):
            raise ManifestError(f"{source}: checkpoints.{name}.{key} must be a string, got {value!r}")
    return CheckpointSpec(name=name, **dict(entry))


def _suites_from(tables: Any, source: str) -> dict[str, SuiteSpec]:
    if not isinstance(tables, Mapping):
        raise ManifestError(f"{source}: `suites` must be tables ([suites.NAME])")
    out = {}
    for name, entry in tables.items():
        if not isinstance(entry, Mapping):
            raise ManifestError(f"{source}: suites.{name} must be a table with `path` and `domain`")
        for key in entry:
            if key not in SUITE_KEYS:
                raise ManifestError(f"{source}: unknown key suites.{name}.{key}{did_you_mean(key, SUITE_KEYS)}; "
                                    f"allowed: {', '.join(SUITE_KEYS)}")
        for key in ("path", "domain"):
            if key not in entry:
                raise ManifestError(f"{source}: suites.{name} has no `{key}`; add {key} = \"...\"")
        out[name] = SuiteSpec(name=name, **dict(entry))
    return out


def manifest_path(run_dir: str | os.PathLike[str]) -> Path:
    return Path(run_dir) / MANIFEST_NAME


def load_manifest(run_dir: str | os.PathLike[str]) -> Manifest:
    """Read and validate ``run_dir/aclarena.toml``."""
    path = manifest_path(run_dir)
    if not path.is_file():
        raise ManifestError(
            f"no {MANIFEST_NAME} in {Path(run_dir).resolve()}; pass --run DIR or create one with `aclarena-diag init`"
        )
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ManifestError(f"cannot read {path}: {e}") from None
    return parse_manifest(text, source=str(path))


def write_manifest(manifest: Manifest, run_dir: str | os.PathLike[str]) -> Path:
    """Write the manifest atomically (a temporary file, then a rename)."""
    manifest.validate()
    path = manifest_path(run_dir)
    write_text_atomic(path, manifest.to_toml())
    return path


def default_mode(fd: int) -> None:
    """Give a file made by ``tempfile.mkstemp`` (always 0600) the mode a plain ``open`` would: 0666 less the
    umask (0644 usually), so that a report or manifest published by a rename is readable as any other file."""
    mask = os.umask(0)
    os.umask(mask)
    os.fchmod(fd, 0o666 & ~mask)


def write_text_atomic(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` so that readers see the old or the new file, never half."""
    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError:
        raise ManifestError(f"cannot write {path}: the text holds characters that are not UTF-8 (lone surrogates, "
                            "e.g. undecodable bytes of a file name); rename the file or folder") from None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except PermissionError:
        raise ManifestError(f"cannot write in {path.parent}: the folder is read-only; choose a writable --run") from None
    except OSError as e:
        raise ManifestError(f"cannot write in {path.parent}: {e.strerror or e}") from None
    try:
        default_mode(fd)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        keep_mode(Path(tmp), path)
        os.replace(tmp, path)
    except OSError as e:
        Path(tmp).unlink(missing_ok=True)
        raise ManifestError(f"cannot write {path}: {e.strerror or e}") from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def keep_mode(tmp: Path, path: Path) -> None:
    """Give ``tmp`` (about to replace ``path``) the permission bits ``path`` has, or, for a new file, those a
    plain ``open`` would give (0666 less the umask), not mkstemp's 0600 (issue 43: writes kept file modes)."""
    try:
        mode = path.stat().st_mode & 0o7777
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        mode = 0o666 & ~umask
    with contextlib.suppress(OSError):
        os.chmod(tmp, mode)


def check_name(name: object, what: str = "name") -> str:
    """``name`` if it is a valid manifest name (letters, digits, '.', '_', '-'; no leading '.', no '/'),
    else one :class:`ManifestError` line naming ``what`` (e.g. ``--name``)."""
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise ManifestError(f"{what} {name!r} is not allowed: a name uses letters, digits, '.', '_' and '-' "
                            "(not starting with '.'), so that it names a folder inside the run; nothing was written")
    return name


def output_folder(
    run_dir: str | os.PathLike[str],
    name: object,
    *,
    what: str = "--name",
    folder: str = "checkpoints",
    manifest: Manifest | None = None,
    replaceable: tuple[str, ...] = ("consolidated",),
) -> Path:
    """The one check before a verb writes ``RUN/<folder>/<name>`` from a name the user gave or one derived
    from it (``NAME-l0.5``); returns that folder, or raises one :class:`ManifestError` line having written
    nothing.

    Refused: a name that is not a valid manifest name (:func:`check_name`: so no ``..``, ``/`` or absolute
    path), a folder that would land outside ``RUN/<folder>`` all the same, a symbolic link there (writing
    through it lands elsewhere), and, with ``manifest``, a name the manifest holds with a kind outside
    ``replaceable`` or a folder that another checkpoint of the manifest lives in (writing would replace it).
    """
    check_name(name, what)
    assert isinstance(name, str)
    run = Path(os.path.abspath(run_dir))
    parent = run / folder
    target = parent / name
    if Path(os.path.normpath(target)).parent != Path(os.path.normpath(parent)):
        raise ManifestError(f"{what} {name!r} would write outside {parent}; choose a plain name")
    if target.is_symlink():
        raise ManifestError(f"{what} {name!r}: {target} is a symbolic link, so writing there would land in "
                            f"{os.path.realpath(target)}; remove the link or choose another name")
    real_parent = Path(os.path.realpath(parent))
    if parent.is_symlink() and not real_parent.is_relative_to(os.path.realpath(run)):
        raise ManifestError(f"{what} {name!r}: {parent} is a symbolic link to {real_parent}, outside the run, so the "
                            f"output would be written there; make {folder}/ a folder of the run (nothing was written)")
    if manifest is not None:
        existing = manifest.checkpoints.get(name)
        if existing is not None and existing.kind not in replaceable:
            raise ManifestError(f"{what} {name!r} is already a {existing.kind} checkpoint of the manifest; give another "
                                "name (nothing was written)")
        real = os.path.realpath(target)
        for spec in manifest:
            raw = os.path.expanduser(spec.path)
            if spec.name != name and os.path.realpath(raw if os.path.isabs(raw) else run / raw) == real:
                raise ManifestError(f"{what} {name!r}: {target} is the folder of checkpoint {spec.name!r}; give "
                                    "another name (nothing was written)")
    return target


def _toml_key(key: str) -> str:
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else toml_string(key)


_TOML_ESCAPES = {"\\": "\\\\", '"': '\\"', "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}


def toml_string(text: str) -> str:
    """A TOML basic string that reads back as ``text``: every control character (DEL included, which
    JSON leaves raw and TOML forbids) escaped; text that is not Unicode (lone surrogates, e.g. the
    undecodable bytes of a file name) refused, since no TOML file can hold it."""
    out = []
    for ch in text:
        code = ord(ch)
        if 0xD800 <= code <= 0xDFFF:
            raise ManifestError(f"{text!r} holds bytes that are not UTF-8 (a lone surrogate); a manifest is UTF-8 "
                                "text: rename the file or folder")
        if ch in _TOML_ESCAPES:
            out.append(_TOML_ESCAPES[ch])
        elif code < 0x20 or code == 0x7F:
            out.append(f"\\u{code:04X}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return toml_string(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise TypeError(f"cannot write {type(value).__name__} to TOML")
