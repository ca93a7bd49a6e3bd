"""Every reader of a user's file is bounded and each failure is one line: deep nesting, huge JSON integers, a
folder where a file goes, answers too large for a float or that backtrack catastrophically, a scorer module that
fails to import, a GGUF whose metadata contradicts its tensors; a byte-order mark is accepted.

Each test failed on the code before its fix (issue 43, checked against its branch at 3c35d94) unless its
docstring says it guards against refusing something healthy."""

from __future__ import annotations

import pytest
from reliability_helpers import one_line

DEEP = "[" * 20000 + "]" * 20000


def test_a_deeply_nested_manifest_is_one_line(fixture_run, cli):
    toml = fixture_run / "aclarena.toml"
    toml.write_text(toml.read_text().replace("[run]\n", f"[run]\ndeep = {DEEP}\n", 1))
    code, _, err = cli("checkpoints", "--run", str(fixture_run))
    assert code == 1 and "too deeply" in one_line(err, "checkpoints")


def test_a_deeply_nested_training_config_is_one_line(tmp_path):
    from train_helpers import TINY

    from aclarena.errors import AclarenaError
    from aclarena.train.config import parse_config

    text = TINY.read_text().replace("[run]\n", f"[run]\ndeep = {DEEP}\n", 1)
    with pytest.raises(AclarenaError, match="too deeply"):
        parse_config(text, "deep.toml")


def test_a_byte_order_mark_in_the_manifest_is_accepted(fixture_run, cli):
    """Before: "Invalid statement (line 1, column 1)" for a manifest a Windows editor saved."""
    toml = fixture_run / "aclarena.toml"
    toml.write_text("\ufeff" + toml.read_text(), encoding="utf-8")
    code, _, err = cli("checkpoints", "--run", str(fixture_run))
    assert code == 0, err


LONG_INT = "1" + "0" * 5000  # JSON allows it; Python refuses to convert integers over 4,300 digits


def test_json_integers_over_4300_digits_are_one_line(fixture_run, tmp_path, cli):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"prompt": "what is 3 + 4?"}\n{"prompt": "x", "n": ' + LONG_INT + "}\n")
    code, _, err = cli("probe", "--ref", "seq-math", "--prompts", str(prompts), "--run", str(fixture_run))
    assert code == 1
    line = one_line(err, "probe")
    assert "line 2" in line and "too long" in line
    suite = tmp_path / "s.jsonl"
    suite.write_text('{"prompt": "q", "answer": "1", "n": ' + LONG_INT + "}\n")
    code, _, err = cli("init", "--run", str(tmp_path / "new"), f"base={fixture_run / 'checkpoints' / 'base'}",
                       "--suite", f"mine={suite}", "--suite-domain", "mine=math")
    assert code == 1 and "line 1" in one_line(err, "init") and not (tmp_path / "new" / "aclarena.toml").exists()


def test_a_suite_path_that_is_a_folder_is_named_a_folder(fixture_run, tmp_path, cli):
    folder = tmp_path / "suite"
    folder.mkdir()
    code, _, err = cli("init", "--run", str(tmp_path / "new"), f"base={fixture_run / 'checkpoints' / 'base'}",
                       "--suite", f"mine={folder}", "--suite-domain", "mine=math")
    assert code == 1 and "is a folder" in one_line(err, "init")


def test_a_numeric_answer_too_large_for_a_float_is_one_line(tmp_path):
    from aclarena.envs.custom import read_items
    from aclarena.errors import AclarenaError
    from aclarena.store.manifest import SuiteSpec

    f = tmp_path / "t.jsonl"
    f.write_text('{"prompt": "q", "answer": 4}\n{"prompt": "q2", "answer": ' + "9" * 400 + "}\n")
    with pytest.raises(AclarenaError, match="line 2: .*not a number a float can hold"):
        read_items(f, SuiteSpec(name="s", path=str(f), domain="d", scorer="numeric"))


@pytest.mark.parametrize("source, needle", [
    ("def score(reply, answer, item):\n    return 1 +\n", "SyntaxError"),
    ("raise RuntimeError('no config here')\n", "RuntimeError: no config here"),
    ("import tests_not_installed_dependency_xyz\n", "ModuleNotFoundError"),
], ids=["SyntaxError", "an exception at import", "a missing dependency of the module"])
def test_a_scorer_module_that_fails_to_import_names_the_users_file(tmp_path, monkeypatch, source, needle):
    from aclarena.envs.custom import make_scorer
    from aclarena.errors import AclarenaError
    from aclarena.store.manifest import SuiteSpec

    name = f"tests_broken_scorer_{abs(hash(source)) % 10**8}"
    (tmp_path / f"{name}.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    spec = SuiteSpec(name="s", path="t.jsonl", domain="d", scorer=f"{name}:score")
    with pytest.raises(AclarenaError) as e:
        make_scorer(spec, allow_code=True)
    msg = str(e.value)
    assert needle in msg and f"{name}.py line " in msg and "\n" not in msg


@pytest.mark.timeout(90)
def test_a_catastrophically_backtracking_answer_is_bounded(tmp_path, monkeypatch):
    """`(a|aa)+$` against 40 a's and a '!': re backtracks through ~10^8 paths (eval hung with no output); now the
    search stops after its time bound with one line naming the pattern."""
    import time

    import aclarena.envs.custom as custom
    from aclarena.envs.custom import make_scorer
    from aclarena.errors import AclarenaError
    from aclarena.store.manifest import SuiteSpec

    monkeypatch.setattr(custom, "REGEX_TIMEOUT_S", 0.5, raising=False)  # the bound itself (2 s) is not the point
    score = make_scorer(SuiteSpec(name="s", path="t.jsonl", domain="d", scorer="regex"))
    assert score("it jumped", r"\bjump(s|ed)?\b", {"id": "ok"}) == 1.0
    t0 = time.monotonic()
    with pytest.raises(AclarenaError, match=r"\(a\|aa\)\+\$.*backtracking"):
        score("a" * 40 + "!", "(a|aa)+$", {"id": "q1"})
    assert time.monotonic() - t0 < 30


def test_a_gguf_whose_metadata_contradicts_its_tensors_is_one_line(tmp_path, tokenizer, cli):
    pytest.importorskip("gguf")
    from gguf_helpers import write_llama_gguf

    from aclarena.models.tiny import build_model, tiny_config

    model = build_model(tiny_config(tokenizer, arch="llama", num_heads=4, num_kv_heads=2), seed=3)
    model.config.intermediate_size += 16  # the metadata says so; the tensors keep their shapes
    path = tmp_path / "lying.gguf"
    write_llama_gguf(model, tokenizer, path)
    code, _, err = cli("import", str(path), "--out", str(tmp_path / "m"))
    assert code == 1, err
    assert "cannot read" in one_line(err, "import") or "does not fit" in one_line(err, "import")
    assert not (tmp_path / "m").exists() and not list(tmp_path.glob(".m.*"))
