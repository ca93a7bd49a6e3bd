"""Fuzzing the parsers that read user text: the run manifest, the curriculum config and the arena's
tool-call parser. Whatever the input, each answers or raises its defined error, never anything else."""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aclarena.envs.rollout import Parsed, parse_assistant
from aclarena.errors import AclarenaError
from aclarena.store.manifest import parse_manifest
from aclarena.train.config import parse_config

ROOT = Path(__file__).resolve().parents[2]
FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# TOML-looking fragments, so that many inputs parse as TOML and reach the validation after it
KEYS = st.sampled_from(["run", "checkpoints", "name", "base", "path", "kind", "domain", "phase", "parent", "on",
                        "stages", "phases", "sft", "rl", "trl", "seed", "seeds", "oracles", "x", "checkpoints.a",
                        "checkpoints.b", "stage", "learning_rate", "max_steps", "num_generations"])
VALUES = st.one_of(st.integers(-3, 10**6).map(str), st.floats(allow_nan=False).map(repr),
                   st.text(max_size=12).map(json.dumps), st.sampled_from(["true", "false", "[]", "{}", '["a", 1]',
                                                                          '"base"', '"stage"', '"math"', '"rl"',
                                                                          '"sft"', "nan", "inf", '"../x"']))
LINES = st.one_of(st.tuples(KEYS, VALUES).map(lambda kv: f"{kv[0]} = {kv[1]}"),
                  KEYS.map(lambda k: f"[{k}]"), KEYS.map(lambda k: f"[[{k}]]"), st.text(max_size=20))
TOMLISH = st.lists(LINES, max_size=14).map("\n".join)


def _mutations(text: str) -> st.SearchStrategy[str]:
    """A valid file with lines dropped, duplicated or replaced."""
    lines = text.splitlines()
    return st.lists(st.tuples(st.integers(0, max(len(lines) - 1, 0)), st.sampled_from(["drop", "dup", "swap"]),
                              LINES), max_size=4).map(lambda ops: "\n".join(_apply(list(lines), ops)))


def _apply(lines: list[str], ops: list[tuple[int, str, str]]) -> list[str]:
    for i, op, new in ops:
        if not lines:
            break
        i %= len(lines)
        if op == "drop":
            del lines[i]
        elif op == "dup":
            lines.insert(i, lines[i])
        else:
            lines[i] = new
    return lines


MANIFEST = """[run]
name = "mini"
base = "base"

[checkpoints.base]
path = "checkpoints/base"
kind = "base"

[checkpoints.seq-math]
path = "checkpoints/seq-math"
kind = "stage"
domain = "math"
phase = "rl"
parent = "base"
"""


@FUZZ
@given(st.one_of(TOMLISH, _mutations(MANIFEST), st.text(max_size=200)))
def test_manifest_parser(text):
    try:
        m = parse_manifest(text)
    except AclarenaError as e:
        assert str(e).strip() and "\n" not in str(e).strip()
        return
    for spec in m:  # a manifest that parses is consistent
        if spec.parent is not None:
            assert m.resolve(spec.parent).name == spec.parent


TINY = (ROOT / "examples" / "tiny.toml").read_text(encoding="utf-8")


@FUZZ
@given(st.one_of(TOMLISH, _mutations(TINY), st.text(max_size=200)))
def test_curriculum_config_parser(text):
    try:
        parse_config(text, "fuzz.toml")
    except AclarenaError as e:
        assert str(e).strip()


@FUZZ
@given(st.lists(st.one_of(
    st.text(max_size=30),
    st.sampled_from(["<tool_call>", "</tool_call>", "<think>", "</think>", "{", "}", '"name"', '"arguments"', ":",
                     ",", '"search"', '""', "[]", "null", "\\", '{"name": "search", "arguments": {"query": "x"}}',
                     '{"name": "f", "arguments": "{\\"a\\": 1}"}', '{"name": 3}', '{"arguments": {}}']),
    st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=5),
                 lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=5), c, max_size=3),
                 max_leaves=6).map(json.dumps),
), max_size=12).map("".join))
def test_tool_call_parser(text):
    parsed = parse_assistant(text)  # never raises: malformed calls are a failed step
    assert isinstance(parsed, Parsed)
    for call in parsed.calls:
        assert isinstance(call["name"], str) and call["name"] and isinstance(call["arguments"], dict)
    assert parsed.error is None or parsed.error.startswith("malformed tool call")
    if "<tool_call>" not in text and "</tool_call>" not in text:
        assert parsed.calls == [] and parsed.error is None


TRL_VALUES = st.one_of(st.text(max_size=20), st.sampled_from(["1e-4", "true", '"x"', "[1, 2]", "{a = 1}", "1\nv = 2",
                                                                "[" * 3000, "{a = " * 3000, "inf", "nan"]))


@FUZZ
@given(st.sampled_from(["learning_rate", "rl.max_steps", "sft.report_to", "max_steps", "x.y"]), TRL_VALUES)
def test_trl_overrides(field, raw):
    """`--trl FIELD=VALUE` of `train` and `consolidate`: values read as TOML answer or say one line
    (a value nested a few thousand levels deep was tomllib's RecursionError, exit 3)."""
    from aclarena.consolidate.recipe import parse_trl
    from aclarena.train.config import parse_overrides

    for parse in (parse_trl, parse_overrides):
        try:
            parse([f"{field}={raw}"])
        except AclarenaError as e:
            msg = str(e).strip()
            assert msg and "\n" not in msg, msg
