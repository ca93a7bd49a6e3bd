"""JSON Lines and JSON inputs (issue 15): records are separated by "\\n" only, so valid files whose
strings hold U+2028, U+2029 or U+0085 are read as written; lone surrogates and deeply nested values
are refused with one line naming the file and line; results.h5 unchanged."""

from __future__ import annotations

import json

import pytest
from distributed_helpers import file_hash
from reliability_helpers import seed_store

from aclarena.errors import AclarenaError
from aclarena.probes.probe_set import read_prompts, read_traces

SEPARATORS = ["\u2028", "\u2029", "\u0085"]


@pytest.mark.parametrize("sep", SEPARATORS, ids=[f"U+{ord(s):04X}" for s in SEPARATORS])
def test_unicode_line_separators_inside_strings_are_kept(tmp_path, sep):
    f = tmp_path / "prompts.jsonl"
    rows = [{"prompt": f"one{sep}two"}, {"prompt": "three"}]
    # ensure_ascii=False writes the character itself, as editors and most tools do
    f.write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in rows) + "\r\n", encoding="utf-8")
    assert [p["prompt"] for p in read_prompts(f)] == [r["prompt"] for r in rows]


def test_traces_keep_u2028_in_their_messages(tmp_path):
    f = tmp_path / "traces.jsonl"
    trace = {"messages": [{"role": "user", "content": "a\u2028b"}, {"role": "assistant", "content": "c\u2029d"}]}
    f.write_text(json.dumps(trace, ensure_ascii=False) + "\n", encoding="utf-8")
    assert read_traces(f)[0]["messages"][1]["content"] == "c\u2029d"


BAD_LINES = [
    ('{"prompt": "\\ud800 alone"}', "lone surrogate"),
    ('{"prompt": "x", "\\udfff": 1}', "lone surrogate"),
    ('{"prompt": "x", "meta": ' + "[" * 100_000 + "]" * 100_000 + "}", "nested deeper"),
    ('{"prompt": "x", "meta": ' + "[" * 70 + "]" * 70 + "}", "nested deeper"),
]


@pytest.mark.parametrize("line, needle", BAD_LINES, ids=["surrogate value", "surrogate key", "100000 deep", "70 deep"])
def test_lone_surrogates_and_deep_nesting_are_one_line(fixture_run, tmp_path, cli, line, needle):
    f = tmp_path / "p.jsonl"
    f.write_text('{"prompt": "fine"}\n' + line + "\n", encoding="utf-8")
    with pytest.raises(AclarenaError, match=f"line 2.*{needle}"):
        read_prompts(f)
    seed_store(fixture_run)
    before = file_hash(fixture_run / "results.h5")
    code, _, err = cli("probe", "--ref", "seq-math", "--prompts", str(f), "--run", str(fixture_run))
    assert code == 1 and "Traceback" not in err, err
    lines = [ln for ln in err.splitlines() if ln.startswith("aclarena-diag")]
    assert len(lines) == 1 and "line 2" in lines[0] and needle in lines[0], err
    assert file_hash(fixture_run / "results.h5") == before


def test_lm_eval_results_nested_too_deep_is_one_line(fixture_run, tmp_path, cli):
    f = tmp_path / "results.json"
    f.write_text('{"results": ' + "[" * 50_000 + "]" * 50_000 + "}")
    seed_store(fixture_run)
    before = file_hash(fixture_run / "results.h5")
    code, _, err = cli("eval", "--import-lm-eval", f"seq-math={f}", "--run", str(fixture_run))
    assert code == 1 and "Traceback" not in err and "internal error" not in err, err
    assert "nested deeper" in err
    assert file_hash(fixture_run / "results.h5") == before
