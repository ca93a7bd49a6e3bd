"""The curricula shipped with aclarena: ``quick`` (what ``aclarena-diag demo`` trains by default: two
stages in minutes), ``mini`` (the full four-stage recipe of the reference study, for ``study``) and
``tiny`` (every phase at toy size, for tests). examples/quick.toml, examples/mini.toml and
examples/tiny.toml are the same files (a test keeps them identical)."""

from __future__ import annotations

from pathlib import Path

from aclarena.errors import unknown_name

PRESETS = ("quick", "mini", "tiny")
#: the demo's curriculum when none is named
DEFAULT = "quick"


def preset_path(name: str) -> Path:
    """The TOML file of a shipped curriculum."""
    if name not in PRESETS:
        raise unknown_name("preset", name, PRESETS)
    return Path(__file__).with_name(f"{name}.toml")
