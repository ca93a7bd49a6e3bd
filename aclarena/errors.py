"""User-facing errors.

An :class:`AclarenaError` carries one line that says what is wrong and how to fix it. The
command line prints that line and exits 1, without a traceback; library users catch it
like any exception.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class AclarenaError(Exception):
    """Bad input or an unusable file: the message says what is wrong and how to fix it."""


class ManifestError(AclarenaError):
    """The run manifest (aclarena.toml) is missing, malformed or inconsistent."""


class StoreError(AclarenaError):
    """The results store cannot be read or written."""


class CheckpointError(AclarenaError):
    """A checkpoint cannot be found, inspected or loaded."""


class ConfigError(AclarenaError):
    """A configuration file or option is invalid."""


def did_you_mean(name: str, choices: Iterable[str]) -> str:
    """Return ``" (did you mean 'x'?)"`` for the closest choice, or ``""`` when none is close."""
    close = difflib.get_close_matches(name, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def unknown_name(what: str, name: str, choices: Iterable[str], hint: str = "") -> AclarenaError:
    """Build the error for an unknown name: the known names and a did-you-mean."""
    known = sorted(choices)
    listed = ", ".join(known) if known else "none"
    msg = f"unknown {what} {name!r}{did_you_mean(name, known)}; known: {listed}"
    if hint:
        msg += f"; {hint}"
    return AclarenaError(msg)
