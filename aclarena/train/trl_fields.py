"""Validation of trl config fields set in a curriculum: known to trl's config class, of the default's type.

Used by the config loader (:mod:`aclarena.train.config`) and by the phase runners
(:mod:`aclarena.train.phases`), which build trl's configs; it imports neither, so they do not
import each other.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from functools import cache
from types import MappingProxyType
from typing import Any

from aclarena.errors import ConfigError, did_you_mean

# Fields the phase runners set themselves: a config may not override them.
RESERVED_TRL = ("output_dir", "resume_from_checkpoint", "logging_dir", "run_name", "push_to_hub", "hub_model_id")


class FieldError(ConfigError):
    """A bad value of one field; the loader adds the file and line of that field."""

    def __init__(self, field_name: str, message: str) -> None:
        super().__init__(message)
        self.field = field_name


# --- trl field validation --------------------------------------------------------------------


@cache
def trl_fields(kind: str) -> Mapping[str, Any]:
    """``{field: default}`` of trl's ``SFTConfig`` (``kind="sft"``), ``GRPOConfig`` (``"rl"``) or
    ``DistillationConfig`` (``"distill"``)."""
    import trl

    classes = {"sft": "SFTConfig", "rl": "GRPOConfig", "distill": "DistillationConfig"}
    if kind not in classes:
        raise ValueError(f"`kind` must be 'sft', 'rl' or 'distill', got {kind!r}")
    cls = getattr(trl, classes[kind])
    return MappingProxyType({f.name: f.default for f in dataclasses.fields(cls)})


def check_trl(kind: str, overrides: Mapping[str, Any]) -> None:
    """Raise :class:`FieldError` (field = the bad key) for a field trl's config lacks or a value of the wrong type."""
    known = trl_fields(kind)
    cls = {"sft": "SFTConfig", "rl": "GRPOConfig", "distill": "DistillationConfig"}[kind]
    for key, value in overrides.items():
        if key in RESERVED_TRL:
            raise FieldError(key, f"trl field {key!r} is set by aclarena (per phase); remove it")
        if key not in known:
            raise FieldError(key, f"unknown trl field {key!r} for an {kind.upper()} phase{did_you_mean(key, known)}; "
                                  f"the fields are those of trl's {cls}")
        default = known[key]
        if isinstance(default, bool):
            ok = isinstance(value, bool)
        elif isinstance(default, int):
            ok = isinstance(value, int) and not isinstance(value, bool)
        elif isinstance(default, float):
            ok = isinstance(value, int | float) and not isinstance(value, bool)
        elif isinstance(default, str) and key != "report_to":
            ok = isinstance(value, str)
        else:
            ok = True  # None or a structured default: trl checks the value when it builds the config
        if not ok:
            raise FieldError(key, f"trl field {key!r} must be a {type(default).__name__} like its default "
                                  f"{default!r}, got {value!r}")
