"""Reading JSON Lines and JSON documents written by people and other tools.

JSON Lines separates records by ``\\n`` only: U+2028, U+2029 and U+0085 are ordinary characters
inside JSON strings (``str.splitlines`` would split at them, and at form feeds, and break valid
files). A value whose strings hold lone surrogates (``"\\ud800"``: valid JSON, but not Unicode
text, so no tokenizer or HDF5 file can take it) or that is nested deeper than
:data:`MAX_DEPTH` levels is refused with a :class:`JsonShapeError` naming what is wrong.
"""

from __future__ import annotations

import json
import os
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
    except StrictJsonError:
        raise
    except ValueError as e:  # an integer longer than sys.get_int_max_str_digits()
        raise StrictJsonError(f"{path}: holds a number too long to read ({first_line(e)})") from None
    except RecursionError:
        raise StrictJsonError(f"{path}: nested too deeply to be read") from None


def first_line(e: BaseException, limit: int = 160) -> str:
    return (str(e).strip().splitlines() or [type(e).__name__])[0][:limit]


def key_list(obj: dict[str, Any]) -> str:
    """An object's keys for a one-line error, each JSON-quoted (a key may hold a newline); ``none`` when empty."""
    return ", ".join(json.dumps(k) for k in obj) or "none"


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
    except json.JSONDecodeError:
        raise
    except ValueError as e:  # an integer longer than sys.get_int_max_str_digits() (4,300 by default)
        raise JsonShapeError(f"holds a number too long to read ({first_line(e)})") from None
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


def read_objects(path: str | os.PathLike[str], what: str, example: str) -> list[tuple[int, dict[str, Any]]]:
    """``(line number, object)`` of every non-blank line of a JSONL file of objects; errors are one
    line naming the file, the line and the fix (``what`` names the file's role, ``example`` a line)."""
    from aclarena.errors import AclarenaError

    p = Path(path)

    def bad(lineno: int, why: str) -> AclarenaError:
        return AclarenaError(f"{p} line {lineno}: {why}")

    if p.is_dir():
        raise AclarenaError(f"{what} file {p} is a folder, not a file; pass a JSONL file ({example})")
    if not p.is_file():
        raise AclarenaError(f"{what} file {p} does not exist; pass a JSONL file ({example})")
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise AclarenaError(f"{p} is not UTF-8 text ({e.reason} at byte {e.start}); save it as UTF-8 JSONL") from None
    except OSError as e:
        raise AclarenaError(f"cannot read {p}: {e.strerror}") from None
    rows = []
    for lineno, line in lines(text):  # "\n" only: U+2028 and friends may sit inside strings
        if not line.strip():
            continue
        try:
            obj = loads(line)
        except json.JSONDecodeError as e:
            raise bad(lineno, f"not valid JSON ({e.msg} at column {e.colno}); write one JSON object per line") from None
        except JsonShapeError as e:
            raise bad(lineno, f"cannot be used: {e}; fix that line") from None
        if not isinstance(obj, dict):
            raise bad(lineno, f"must be a JSON object ({example})")
        rows.append((lineno, obj))
    if not rows:
        raise AclarenaError(f"{what} file {p} is empty; write one JSON object per line ({example})")
    return rows
