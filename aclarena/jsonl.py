"""Reading JSON Lines and JSON documents written by people and other tools.

JSON Lines separates records by ``\\n`` only: U+2028, U+2029 and U+0085 are ordinary characters
inside JSON strings (``str.splitlines`` would split at them, and at form feeds, and break valid
files). A value whose strings hold lone surrogates (``"\\ud800"``: valid JSON, but not Unicode
text, so no tokenizer or HDF5 file can take it) or that is nested deeper than
:data:`MAX_DEPTH` levels is refused with a :class:`JsonShapeError` naming what is wrong.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

MAX_DEPTH = 64


class JsonShapeError(ValueError):
    """A JSON value that parses but cannot be used: lone surrogates or nesting too deep."""


class StrictJsonError(ValueError):
    """A result file that is not strict JSON (one line: which file and what is wrong)."""


def strict_json(path: Path) -> Any:
    """Read ``path`` as strict JSON: NaN and infinities are refused (they are not JSON).

    Raises:
        StrictJsonError: not JSON, or a NaN / infinity in it.
    """

    def refuse(name: str) -> Any:
        raise StrictJsonError(f"{path}: {name} is not strict JSON; write null for a missing number")

    try:
        return json.loads(path.read_text(encoding="utf-8"), parse_constant=refuse)
    except json.JSONDecodeError as e:
        raise StrictJsonError(f"{path}: not JSON ({e.msg} at line {e.lineno}); regenerate it") from None


def lines(text: str) -> Iterator[tuple[int, str]]:
    """``(line number, line)`` of JSON Lines text, split on ``\\n`` only (a ``\\r`` before it dropped)."""
    for lineno, line in enumerate(text.split("\n"), start=1):
        yield lineno, line[:-1] if line.endswith("\r") else line


def loads(text: str) -> Any:
    """``json.loads`` that also refuses lone surrogates and nesting deeper than :data:`MAX_DEPTH`.

    Raises:
        json.JSONDecodeError: not JSON.
        JsonShapeError: JSON, but too deep or not Unicode text.
    """
    try:
        value = json.loads(text)
    except RecursionError:
        raise JsonShapeError(f"nested deeper than {MAX_DEPTH} levels") from None
    check(value)
    return value


def check(value: Any) -> None:
    """Refuse lone surrogates in any string (keys included) and nesting deeper than :data:`MAX_DEPTH`."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        v, depth = stack.pop()
        if isinstance(v, str):
            _check_text(v)
        elif isinstance(v, dict | list):
            if depth >= MAX_DEPTH:
                raise JsonShapeError(f"nested deeper than {MAX_DEPTH} levels")
            items = v.items() if isinstance(v, dict) else enumerate(v)
            for k, x in items:
                if isinstance(k, str):
                    _check_text(k)
                stack.append((x, depth + 1))


def _check_text(s: str) -> None:
    try:
        s.encode("utf-8")
    except UnicodeEncodeError as e:
        raise JsonShapeError(f"a string holds a lone surrogate (\\u{ord(s[e.start]):04x}), which is not "
                             "Unicode text") from None
