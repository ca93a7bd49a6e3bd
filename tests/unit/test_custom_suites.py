"""Bring-your-own eval suites (issue 32): the manifest table, the task file's checks, and the scorers."""

from __future__ import annotations

import json

import pytest

from aclarena.envs import get_env, parse_suite, resolve_suites, sample_tasks, suite_chance
from aclarena.envs.base import Step, Trajectory
from aclarena.envs.custom import last_number, normalize, read_items, register_suites
from aclarena.errors import AclarenaError, ManifestError
from aclarena.store.manifest import Manifest, SuiteSpec, parse_manifest

LINES = [
    {"id": "q1", "prompt": "Capital of France?", "answer": "Paris"},
    {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"}], "answer": 4},
    {"prompt": "Name a primary colour.", "answer": ["red", "blue", "yellow"]},
]


@pytest.fixture(autouse=True)
def _forget_registered_suites():
    yield
    register_suites(Manifest(name="none"), ".")  # the registry is per process: leave it empty


def _suite(tmp_path, lines=LINES, **fields):
    f = tmp_path / "tasks.jsonl"
    f.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    m = Manifest(name="r")
    m.suites["mine"] = SuiteSpec(name="mine", path="tasks.jsonl", domain="geo", **fields)
    register_suites(m, tmp_path, allow_code=fields.get("scorer", "").startswith("tests_"))
    return m, get_env("mine")


def _score(env, task, reply):
    traj = Trajectory(task=task, messages=[], steps=[Step(turn=1, text=reply, content=reply)], state={},
                      end_reason="answer")
    return env.score(task, traj)["reward"]


def test_manifest_round_trips_a_suite_table():
    text = ('[run]\nname = "r"\n\n[suites.qa]\npath = "t.jsonl"\ndomain = "search"\nscorer = "numeric"\n'
            'tolerance = 0.5\nmax_new_tokens = 32\n')
    m = parse_manifest(text)
    assert m.suites["qa"].scorer == "numeric" and m.suites["qa"].tolerance == 0.5
    assert parse_manifest(m.to_toml()).suites == m.suites
    with pytest.raises(ManifestError, match="unknown key suites.qa.scorr.*did you mean 'scorer'"):
        parse_manifest('[suites.qa]\npath = "t"\ndomain = "d"\nscorr = "exact"\n')
    with pytest.raises(ManifestError, match="suites.qa has no `domain`"):
        parse_manifest('[suites.qa]\npath = "t"\n')
    with pytest.raises(ManifestError, match="scorer 'regx'.*did you mean 'regex'"):
        parse_manifest('[suites.qa]\npath = "t"\ndomain = "d"\nscorer = "regx"\n')
    assert parse_manifest('[suites.qa]\npath = "t"\ndomain = "d"\nscorer = "my.pkg:score"\n').suites["qa"].is_callable


def test_tasks_come_from_the_file_with_the_lines_own_messages(tmp_path):
    _, env = _suite(tmp_path)
    tasks = sample_tasks("mine", 100, seed=0)
    assert [t.id for t in tasks][0] == "mine/q1" and len(tasks) == 3  # -n above the file: every item
    assert tasks[0].messages == [{"role": "user", "content": "Capital of France?"}]  # no system prompt added
    assert tasks[1].messages[0] == {"role": "system", "content": "Be brief."}
    assert tasks[0].suite == "mine" and parse_suite("mine") == ("mine", "id")
    two = sample_tasks("mine", 2, seed=1)
    assert len(two) == 2 and two == sample_tasks("mine", 2, seed=1)
    assert resolve_suites("custom") == ["mine"] and resolve_suites("mine,math/id") == ["mine", "math/id"]
    assert suite_chance("mine") == 0.0
    with pytest.raises(AclarenaError, match="eval suite"):
        sample_tasks("mine", 2, split="train")


def test_scorers(tmp_path):
    assert normalize("The  Eiffel-Tower!") == "eiffel tower"
    assert last_number("it is 1,234.5 or so; no, 12") == 12.0 and last_number("none") is None
    _, env = _suite(tmp_path)
    t = sample_tasks("mine", 3)
    assert _score(env, t[0], "paris.") == 1.0 and _score(env, t[0], "Lyon") == 0.0  # normalized by default
    assert _score(env, t[2], "Blue") == 1.0  # any of several answers
    _, env = _suite(tmp_path, scorer="exact")
    t = sample_tasks("mine", 3)
    assert _score(env, t[0], " Paris\n") == 1.0 and _score(env, t[0], "paris") == 0.0
    _, env = _suite(tmp_path, lines=[{"prompt": "2+2?", "answer": 4}], scorer="numeric")
    (t,) = sample_tasks("mine", 1)
    assert _score(env, t, "2+2 makes 4.") == 1.0 and _score(env, t, "it is 5") == 0.0 and _score(env, t, "?") == 0.0
    _, env = _suite(tmp_path, lines=[{"prompt": "x", "answer": r"\bjump(s|ed)?\b"}], scorer="regex")
    (t,) = sample_tasks("mine", 1)
    assert _score(env, t, "it jumped") == 1.0 and _score(env, t, "jumper") == 0.0
    _, env = _suite(tmp_path, lines=[{"prompt": "x", "answer": "7"}], scorer="exact", extract=r"Answer:\s*(\S+)")
    (t,) = sample_tasks("mine", 1)
    assert _score(env, t, "think... Answer: 7") == 1.0 and _score(env, t, "7") == 0.0


def test_a_callable_scorer_needs_allow_code(tmp_path, monkeypatch):
    (tmp_path / "tests_scorer_mod.py").write_text(
        "def score(reply, answer, item):\n    return len(reply) == item['length']\n"
        "def bad(reply, answer, item):\n    return 3\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    lines = [{"prompt": "say 3 letters", "length": 3}]
    with pytest.raises(AclarenaError, match="runs code.*--allow-code"):
        m, _ = _suite(tmp_path, lines=lines, scorer="other_mod:score")
    _, env = _suite(tmp_path, lines=lines, scorer="tests_scorer_mod:score")
    (t,) = sample_tasks("mine", 1)
    assert _score(env, t, "abc") == 1.0 and _score(env, t, "abcd") == 0.0
    _, env = _suite(tmp_path, lines=lines, scorer="tests_scorer_mod:bad")
    with pytest.raises(AclarenaError, match="returned 3.*bool or a number in"):
        _score(env, sample_tasks("mine", 1)[0], "abc")
    with pytest.raises(AclarenaError, match="cannot import tests_nowhere"):
        _suite(tmp_path, lines=lines, scorer="tests_nowhere:f")


@pytest.mark.parametrize("line, needle", [
    ({"answer": "x"}, 'neither "messages" nor "prompt"'),
    ({"prompt": "q"}, 'has no "answer"'),
    ({"prompt": "q", "answer": {"a": 1}}, '"answer" must be'),
    ({"messages": [{"role": "assistant", "content": "hi"}], "answer": "x"}, "must end with a user message"),
    ({"messages": [{"role": "robot", "content": "hi"}], "answer": "x"}, "message 0 must be"),
    ({"prompt": "q", "answer": "x", "id": "a/b"}, '"id" must be'),
], ids=["no prompt", "no answer", "answer an object", "ends with assistant", "bad role", "id with slash"])
def test_bad_lines_are_one_line_naming_file_and_line(tmp_path, line, needle):
    f = tmp_path / "t.jsonl"
    f.write_text(json.dumps({"prompt": "ok", "answer": "y"}) + "\n" + json.dumps(line) + "\n")
    with pytest.raises(AclarenaError, match="line 2: ") as e:
        read_items(f, SuiteSpec(name="s", path=str(f), domain="d"))
    assert needle in str(e.value)


def test_regex_answers_must_compile(tmp_path):
    f = tmp_path / "t.jsonl"
    f.write_text(json.dumps({"prompt": "q", "answer": "a|b"}) + "\n" + json.dumps({"prompt": "r", "answer": "a("}) + "\n")
    with pytest.raises(AclarenaError, match=r"line 2: \"answer\" 'a\(' is not a regular expression"):
        read_items(f, SuiteSpec(name="s", path=str(f), domain="d", scorer="regex"))
    assert len(read_items(f, SuiteSpec(name="s", path=str(f), domain="d"))) == 2  # exact scorer: any text


def test_repeated_items_numeric_answers_and_reserved_names(tmp_path):
    f = tmp_path / "t.jsonl"
    f.write_text(json.dumps({"prompt": "q", "answer": "1"}) + "\n" + json.dumps({"prompt": "q", "answer": "1"}) + "\n")
    with pytest.raises(AclarenaError, match="line 2: repeats the task of line 1"):
        read_items(f, SuiteSpec(name="s", path=str(f), domain="d"))
    f.write_text(json.dumps({"prompt": "q", "answer": "many"}) + "\n")
    with pytest.raises(AclarenaError, match="not a number"):
        read_items(f, SuiteSpec(name="s", path=str(f), domain="d", scorer="numeric"))
    m = Manifest(name="r")
    m.suites["math"] = SuiteSpec(name="math", path=str(f), domain="d")
    with pytest.raises(ManifestError, match="suite name 'math' is taken"):
        register_suites(m, tmp_path)
