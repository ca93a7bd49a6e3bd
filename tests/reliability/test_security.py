"""Security defaults: no eval/exec of input, no pickle or remote code unless asked, the dashboard on
127.0.0.1 without debug unless told. Path traversal against the dashboard is tested in
tests/browser/test_home_page.py::test_dashboard_serves_no_run_files; pickle-only checkpoints in
tests/integration/test_checkpoints.py::test_pickle_refused_unless_allowed and the bad-input matrix."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "aclarena"


def _calls() -> list[tuple[Path, ast.Call]]:
    out = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        out += [(path, node) for node in ast.walk(tree) if isinstance(node, ast.Call)]
    return out


def _name(func: ast.expr) -> str:
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return f"{_name(func.value)}.{func.attr}"
    return ""


def test_package_never_evaluates_or_unpickles_input():
    calls = _calls()
    assert len(calls) > 1000  # the scan saw the package
    bad = []
    for path, call in calls:
        name = _name(call.func)
        where = f"{path.relative_to(PACKAGE.parent)}:{call.lineno} {name}"
        if name in ("eval", "exec", "compile", "__import__", "builtins.eval", "builtins.exec"):
            bad.append(where)
        if name in ("pickle.load", "pickle.loads", "marshal.loads", "yaml.load", "yaml.unsafe_load", "dill.load"):
            bad.append(where)
        if name == "torch.load" and not any(k.arg == "weights_only" and isinstance(k.value, ast.Constant)
                                            and k.value.value is True for k in call.keywords):
            bad.append(where + " without weights_only=True")
        for k in call.keywords:
            if k.arg == "trust_remote_code" and isinstance(k.value, ast.Constant) and k.value.value is True:
                bad.append(where + " trust_remote_code=True")
            if k.arg == "shell" and isinstance(k.value, ast.Constant) and k.value.value is True:
                bad.append(where + " shell=True")
    assert bad == []


def test_scan_catches_what_it_looks_for(tmp_path):
    """The scan itself: a planted eval, pickle.load and trust_remote_code=True are found."""
    src = "import pickle\neval(x)\npickle.load(f)\nfrom_pretrained(p, trust_remote_code=True)\n"
    names = [_name(n.func) for n in ast.walk(ast.parse(src)) if isinstance(n, ast.Call)]
    assert {"eval", "pickle.load", "from_pretrained"} <= set(names)


def test_load_defaults_refuse_pickle_and_remote_code(fixture_run, monkeypatch):
    import transformers

    from aclarena.models.loading import LoadOptions, load_model, load_tokenizer
    from aclarena.store.manifest import load_manifest

    opts = LoadOptions()
    assert opts.allow_pickle is False and opts.trust_remote_code is False and opts.device == "cpu"
    seen = {}
    real_model = transformers.AutoModelForCausalLM.from_pretrained
    real_tok = transformers.AutoTokenizer.from_pretrained

    def spy_model(*a, **k):
        seen["model"] = k
        return real_model(*a, **k)

    def spy_tok(*a, **k):
        seen["tokenizer"] = k
        return real_tok(*a, **k)

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", spy_model)
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", spy_tok)
    m = load_manifest(fixture_run)
    load_model("seq-math", m, fixture_run)
    load_tokenizer("seq-math", m, fixture_run)
    assert seen["model"]["trust_remote_code"] is False
    assert seen["model"]["use_safetensors"] is True  # pickle weights are never read by default
    assert seen["tokenizer"]["trust_remote_code"] is False


def test_dashboard_serves_localhost_without_debug_unless_told(fixture_run, monkeypatch, cli):
    from dash import Dash

    runs = []
    monkeypatch.setattr(Dash, "run", lambda self, **k: runs.append(k))
    assert cli("dashboard", "--run", str(fixture_run))[0] == 0
    assert runs[-1]["host"] == "127.0.0.1" and runs[-1]["debug"] is False
    code, _, err = cli("dashboard", "--run", str(fixture_run), "--host", "0.0.0.0", "--dev")
    assert code == 0 and runs[-1] == {"host": "0.0.0.0", "port": 8050, "debug": True}
    assert "anyone who can reach this machine" in err


@pytest.mark.parametrize("verb", ["probe", "tokens", "checkpoints"])
def test_allow_pickle_is_opt_in(verb):
    from aclarena.cli import build_parser

    argv = {"probe": ["probe", "--ref", "x"], "tokens": ["tokens", "--ref", "x"], "checkpoints": ["checkpoints"]}
    assert build_parser().parse_args(argv[verb]).allow_pickle is False
