"""A run's checkpoints: lineage, size, dtype, tokenizer, and whether each loads (``aclarena-diag checkpoints``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from aclarena.analysis._common import RunPath, frame, manifest_or_load
from aclarena.models.checkpoint import inspect_all
from aclarena.store import Manifest

COLUMNS = ("name", "kind", "domain", "phase", "parent", "on", "source", "location", "architecture", "parameters",
           "dtype", "tokenizer", "loadable", "problem", "quantization", "imported_from")


@dataclass(frozen=True)
class CheckpointsResult:
    """One row per checkpoint of the manifest, in its order (``COLUMNS``); nothing is written."""

    run: str
    base: str | None
    rows: tuple[dict[str, Any], ...]
    writes: tuple[str, ...] = field(default=())

    def to_pandas(self) -> Any:
        """DataFrame, one row per checkpoint."""
        return frame(self.rows, list(COLUMNS))

    def to_dict(self) -> dict[str, Any]:
        """Plain data: what ``aclarena-diag checkpoints --json`` prints."""
        return {"run": self.run, "base": self.base, "checkpoints": [dict(r) for r in self.rows]}


def checkpoints(run_dir: RunPath, *, allow_pickle: bool = False, manifest: Manifest | None = None) -> CheckpointsResult:
    """Inspect every checkpoint of the run in ``run_dir`` (reads configs and file headers, loads no weights)."""
    manifest = manifest_or_load(run_dir, manifest)
    rows = []
    for info in inspect_all(manifest, run_dir, allow_pickle=allow_pickle):
        s = info.spec
        rows.append({
            "name": s.name,
            "kind": s.kind,
            "domain": s.domain,
            "phase": s.phase,
            "parent": s.parent,
            "on": s.on,
            "source": info.source,
            "location": info.location,
            "architecture": info.architecture,
            "parameters": info.n_parameters,
            "dtype": info.dtype,
            "tokenizer": info.tokenizer_fingerprint,
            "chat_template": info.chat_template,
            "prompt_format": _prompt_format(s.prompt_format, info.chat_template),
            "loadable": info.loadable,
            "problem": info.problem,
            **_imported(info.location if info.source == "folder" else None),
        })
    return CheckpointsResult(run=manifest.name, base=manifest.base, rows=tuple(rows))


def _prompt_format(requested: str | None, template: bool | None) -> str:
    """How eval, probe and flips prompt the checkpoint (:func:`aclarena.models.chat.choose_prompt_format`):
    ``chat``, ``plain``, or ``chat (no template)`` where the manifest asks for chat and the tokenizer has none
    (those verbs refuse it in one line)."""
    if requested == "chat" and template is False:
        return "chat (no template)"
    if requested is not None:
        return requested
    return "plain" if template is False else "chat"


def _imported(folder: str | None) -> dict[str, Any]:
    """What a folder written by ``aclarena-diag import`` came from: its source quantization (``Q4_1``)
    and the source file's SHA-256; None for other checkpoints."""
    from aclarena.models.gguf_import import read_import_record

    record = read_import_record(folder) if folder else None
    if record is None:
        return {"quantization": None, "imported_from": None}
    return {"quantization": record.get("quantization"),
            "imported_from": f"{record.get('format', 'gguf')} sha256:{record.get('source_sha256')}"}
