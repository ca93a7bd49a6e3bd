"""Bring-your-own eval suites: a JSONL task file, scored by a chosen scorer, played like an arena suite.

A run's manifest registers them (``[suites.NAME]``, :class:`aclarena.store.manifest.SuiteSpec`)::

    [suites.capitals]
    path = "tasks/capitals.jsonl"   # one task per line
    domain = "geo"                  # the stage domain it measures (for `forgetting`)
    role = "id"                     # id | ood | general
    scorer = "normalized"           # exact | normalized | regex | numeric | pkg.module:function

Each line holds ``messages`` (a chat ending with a user turn) or ``prompt`` (one user message),
an ``answer`` (a string, a number, or a list of accepted answers) and optionally an ``id``; other
keys reach a callable scorer. The model answers in one turn with its own chat template (no system
prompt is added unless the suite or the line gives one, so a template's default system prompt
applies). Scorers read the reply with its ``<think>`` block removed, after the suite's ``extract``
pattern when it has one:

* ``exact``: the reply equals an answer (surrounding white space ignored);
* ``normalized``: equal after lower-casing and removing punctuation, articles and extra spaces
  (SQuAD's normalization, Rajpurkar et al. 2016);
* ``regex``: an answer is a regular expression found in the reply (``re.search``);
* ``numeric``: the reply's last number equals a numeric answer within ``tolerance``;
* ``pkg.module:function``: ``function(reply, answer, item) -> bool | float in [0, 1]``. It runs
  code named by the manifest, so it is refused unless the verb gets ``--allow-code``.

:func:`register_suites` makes a manifest's suites known to :func:`aclarena.envs.get_env`,
:func:`aclarena.envs.sample_tasks` and :func:`aclarena.envs.resolve_suites`, so that ``eval`` writes
their cells (with per-item outcomes and transcripts), ``forgetting`` finds them by domain and
``flips`` replays their items, all through the arena's rollout loop. docs/custom-suites.md.
"""

from __future__ import annotations

import copy
import importlib
import json
import math
import os
import random
import re
import string
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aclarena import jsonl
from aclarena.envs.base import Environment, Task, Trajectory, stable_hash
from aclarena.errors import AclarenaError, ManifestError
from aclarena.store.manifest import Manifest, SuiteSpec

DEFAULT_MAX_NEW_TOKENS = 256
# names `--suites` already gives a meaning to (aclarena.envs.resolve_suites)
RESERVED = ("id", "ood", "general", "all", "custom", "math", "search", "ecom", "if")
CHAT_ROLES = ("system", "user", "assistant")
EXAMPLE = '{"messages": [{"role": "user", "content": "..."}], "answer": "..."} or {"prompt": "...", "answer": "..."}'
NUMBER_RE = re.compile(r"[-+]?(?:\d[\d,]*(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?")
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = str.maketrans({c: " " for c in string.punctuation})

_registry: dict[str, CustomSuite] = {}


@dataclass(frozen=True)
class CustomTask(Task):
    """A task of a custom suite: its opening chat is the line's own messages."""

    @property
    def suite(self) -> str:
        return self.env

    @property
    def messages(self) -> list[dict[str, Any]]:
        return copy.deepcopy(list(self.data["messages"]))  # a fresh list: an episode appends to it


class CustomSuite(Environment):
    """The environment of one custom suite: tasks from its file, one answer turn, its scorer."""

    max_turns = 1

    def __init__(self, spec: SuiteSpec, run_dir: str | os.PathLike[str], *, allow_code: bool = False) -> None:
        self.spec = spec
        self.name = spec.name
        self.variants = (spec.role,)
        self.chance = float(spec.chance or 0.0)
        self.max_new_tokens = spec.max_new_tokens or DEFAULT_MAX_NEW_TOKENS
        self.file = suite_file(spec, run_dir)
        self.items = read_items(self.file, spec)
        self.fewshot_path = fewshot_file(spec, run_dir)
        self.shots = fewshot_messages(spec, run_dir)
        self._score = make_scorer(spec, allow_code=allow_code)

    @property
    def domain(self) -> str:
        return self.spec.domain

    def system_prompt(self, variant: str) -> str:
        return self.spec.system or ""

    def _candidate(self, rng: random.Random, variant: str) -> tuple[str, str, dict[str, Any]]:
        # never reached: generate() below reads the file instead of drawing candidates
        raise AclarenaError(f"suite {self.name!r} has no task generator: its tasks are the items of {self.file}")

    def generate(self, n: int, seed: int = 0, split: str = "eval", variant: str = "id") -> list[Task]:
        """``min(n, items)`` tasks in file order: every item when ``n`` covers the file, else ``n``
        items drawn with ``seed`` (the same for every checkpoint)."""
        self.check_variant(variant)
        if split != "eval":
            raise AclarenaError(f"suite {self.name!r} is an eval suite (its file holds no training split)")
        if not isinstance(n, int) or n < 0:
            raise AclarenaError(f"the number of tasks must be a non-negative integer, got {n!r}")
        idx = list(range(len(self.items)))
        if n < len(idx):
            idx = sorted(random.Random(f"{self.name}|{seed}").sample(idx, n))
        return [self._task(self.items[i]) for i in idx]

    def _task(self, item: dict[str, Any]) -> CustomTask:
        messages = item["messages"]
        data = {**item, "messages": with_fewshot(messages, self.shots)} if self.shots else item
        return CustomTask(id=f"{self.name}/{item['id']}", env=self.name, variant=self.spec.role, split="eval",
                          system=next((m["content"] for m in messages if m["role"] == "system"), ""), tools=None,
                          prompt=next(m["content"] for m in reversed(messages) if m["role"] == "user"),
                          key=str(item["id"]), data=data)

    def score(self, task: Task, trajectory: Trajectory) -> dict[str, float]:
        last = trajectory.steps[-1] if trajectory.steps else None
        reply = last.content if last is not None else ""
        got = self._score(extracted(reply, self.spec.extract), task.data.get("answer"), dict(task.data))
        return {"reward": got}

    def expert_actions(self, task: Task) -> list[str]:
        answers = _answers(task.data.get("answer"))
        return [str(answers[0])] if answers and self.spec.scorer != "regex" else []


def suite_prompts(manifest: Manifest, run_dir: str | os.PathLike[str], domain: str, n: int, seed: int
                  ) -> tuple[list[dict[str, Any]], list[str]] | None:
    """Opening prompts of the run's own suites of ``domain`` (its in-domain ones, ``role = "id"``, when it has
    any; else all of that domain), pooled in name order, ``n`` drawn with ``seed`` when they hold more; and
    the suites' names. None when the manifest has no suite of ``domain``. Only the files are read: a suite
    scored by a Python callable gives its prompts without ``--allow-code``."""
    specs = sorted((s for s in manifest.suites.values() if s.domain == domain), key=lambda s: s.name)
    if not specs:
        return None
    specs = [s for s in specs if s.role == "id"] or specs
    pool = [{"messages": with_fewshot(item["messages"], shots), "tools": None, "domain": domain, "suite": spec.name,
             "task_id": f"{spec.name}/{item['id']}"}
            for spec in specs for shots in [fewshot_messages(spec, run_dir)]
            for item in read_items(suite_file(spec, run_dir), spec)]
    if n < len(pool):
        pool = [pool[i] for i in sorted(random.Random(f"{domain}|{seed}").sample(range(len(pool)), n))]
    return pool, [s.name for s in specs]


# --- files --------------------------------------------------------------------------------------


def fewshot_file(spec: SuiteSpec, run_dir: str | os.PathLike[str]) -> Path | None:
    if spec.fewshot is None:
        return None
    raw = os.path.expanduser(spec.fewshot)
    return Path(raw) if os.path.isabs(raw) else Path(run_dir) / raw


def fewshot_messages(spec: SuiteSpec, run_dir: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The suite's few-shot examples (its ``fewshot`` file, the first ``num_fewshot`` lines) as user/assistant
    message pairs marked ``"fewshot": true`` (:func:`aclarena.models.chat.plain_text` writes them as
    ``prompt answer`` blocks); each line's first accepted answer is the example's. Empty without a file."""
    path = fewshot_file(spec, run_dir)
    if path is None:
        return []
    shots = []
    for item in read_items(path, spec):
        answers = _answers(item.get("answer"))
        if not answers:
            raise AclarenaError(f"{path}: the few-shot example {item['id']!r} has no \"answer\"; each example shows one")
        turns = [m for m in item["messages"] if m["role"] != "system"]
        if len(turns) != 1:
            raise AclarenaError(f"{path}: the few-shot example {item['id']!r} must be one user message (a \"prompt\")")
        shots.append((turns[0]["content"], str(answers[0])))
    k = len(shots) if spec.num_fewshot is None else spec.num_fewshot
    if k > len(shots):
        raise AclarenaError(f"suite {spec.name!r}: num_fewshot = {k} but {path} holds {len(shots)} examples")
    return [m for q, a in shots[:k] for m in ({"role": "user", "content": q, "fewshot": True},
                                                {"role": "assistant", "content": a, "fewshot": True})]


def with_fewshot(messages: list[dict[str, Any]], shots: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``messages`` with the few-shot turns after their system messages."""
    if not shots:
        return messages
    system = [m for m in messages if m["role"] == "system"]
    return [*system, *shots, *(m for m in messages if m["role"] != "system")]


def suite_file(spec: SuiteSpec, run_dir: str | os.PathLike[str]) -> Path:
    raw = os.path.expanduser(spec.path)
    return Path(raw) if os.path.isabs(raw) else Path(run_dir) / raw


def read_items(path: Path, spec: SuiteSpec) -> list[dict[str, Any]]:
    """The tasks of a suite file, checked line by line; errors name the file and the line."""
    out: list[dict[str, Any]] = []
    seen: dict[str, int] = {}
    for lineno, obj in jsonl.read_objects(path, f"suite {spec.name!r}", EXAMPLE):
        def bad(what: str, lineno: int = lineno) -> AclarenaError:
            return AclarenaError(f"{path} line {lineno}: {what}")

        if "messages" in obj:
            messages = _check_chat(obj["messages"], bad)
        elif "prompt" in obj:
            if not isinstance(obj["prompt"], str) or not obj["prompt"].strip():
                raise bad('"prompt" must be a non-empty string')
            messages = [{"role": "user", "content": obj["prompt"]}]
        else:
            raise bad(f'has neither "messages" nor "prompt" (keys: {jsonl.key_list(obj)}); write {EXAMPLE}')
        if spec.system and not any(m["role"] == "system" for m in messages):
            messages = [{"role": "system", "content": spec.system}, *messages]
        _check_answer(obj, spec, bad)
        item_id = obj.get("id")
        if item_id is None:
            item_id = stable_hash(messages, obj.get("answer"))
        elif not isinstance(item_id, str | int) or isinstance(item_id, bool) or "/" in str(item_id):
            raise bad(f'"id" must be a string or an integer without "/", got {item_id!r}')
        item_id = str(item_id)
        if item_id in seen:
            raise bad(f"repeats the task of line {seen[item_id]} (id {item_id!r}); give each line its own \"id\"")
        seen[item_id] = lineno
        out.append({**obj, "id": item_id, "messages": messages})
    return out


def _check_answer(obj: Mapping[str, Any], spec: SuiteSpec, bad: Callable[[str], AclarenaError]) -> None:
    """A task line's "answer": present unless the scorer is a callable, and one the scorer can compare."""
    if "answer" not in obj and not spec.is_callable:
        raise bad(f'has no "answer"; scorer {spec.scorer!r} compares the reply with it')
    answers = _answers(obj.get("answer"))
    if "answer" in obj and not answers:
        raise bad('"answer" must be a string, a number or a non-empty list of them')
    if spec.scorer == "numeric" and any(_as_number(a) is None for a in answers):
        shown = repr(obj["answer"])
        shown = shown if len(shown) <= 60 else f"{shown[:40]}... ({len(shown)} characters)"
        raise bad(f'"answer" {shown} is not a number a float can hold (finite, below ~1.8e308); the numeric '
                  "scorer compares numbers")
    if spec.scorer == "regex":
        for a in answers:
            try:
                re.compile(str(a))
            except (re.error, RecursionError, OverflowError) as e:
                raise bad(f'"answer" {a!r} is not a regular expression ({e})') from None


def _check_chat(messages: Any, bad: Callable[[str], AclarenaError]) -> list[dict[str, Any]]:
    if not isinstance(messages, list) or not messages:
        raise bad('"messages" must be a non-empty list of {"role": ..., "content": ...}')
    out = []
    for j, m in enumerate(messages):
        if not isinstance(m, dict) or m.get("role") not in CHAT_ROLES or not isinstance(m.get("content"), str):
            raise bad(f'message {j} must be {{"role": one of {", ".join(CHAT_ROLES)}, "content": "text"}}')
        out.append({"role": m["role"], "content": m["content"]})
    if out[-1]["role"] != "user":
        raise bad("the conversation must end with a user message (the model answers it)")
    return out


# --- scorers ------------------------------------------------------------------------------------

Scorer = Callable[[str, Any, dict[str, Any]], float]


def _answers(answer: Any) -> list[Any]:
    items = answer if isinstance(answer, list) else [answer]
    return [a for a in items if isinstance(a, str | int | float) and not isinstance(a, bool)]


def normalize(text: str) -> str:
    """Lower case, punctuation and the articles a/an/the removed, white space collapsed (SQuAD)."""
    return " ".join(_ARTICLES.sub(" ", text.lower().translate(_PUNCT)).split())


def _as_number(x: Any) -> float | None:
    if isinstance(x, int | float) and not isinstance(x, bool):
        try:
            return float(x) if math.isfinite(x) else None
        except OverflowError:  # an integer beyond a float's range (over ~1.8e308)
            return None
    if isinstance(x, str):
        found = NUMBER_RE.findall(x)
        if len(found) == 1 and found[0].strip() == x.strip().replace(" ", ""):
            return _parse(found[0])
    return None


def _parse(token: str) -> float | None:
    try:
        v = float(token.replace(",", ""))
    except ValueError:
        return None
    return v if math.isfinite(v) else None


def last_number(text: str) -> float | None:
    """The last number written in ``text`` (thousands separators allowed), or None."""
    for token in reversed(NUMBER_RE.findall(text)):
        v = _parse(token)
        if v is not None:
            return v
    return None


def extracted(reply: str, pattern: str | None) -> str:
    """What is scored: the reply, or the first group (else the whole match) of ``pattern`` in it."""
    if pattern is None:
        return reply
    m = bounded_search(pattern, reply, what="the suite's `extract` pattern")
    if m is None:
        return ""
    return next((g for g in m.groups() if g is not None), m.group(0))


def make_scorer(spec: SuiteSpec, *, allow_code: bool = False) -> Scorer:
    """The function ``(reply, answer, item) -> score in [0, 1]`` of a suite."""
    if spec.scorer == "exact":
        return lambda reply, answer, item: float(any(reply.strip() == str(a).strip() for a in _answers(answer)))
    if spec.scorer == "normalized":
        return lambda reply, answer, item: float(any(normalize(reply) == normalize(str(a)) for a in _answers(answer)))
    if spec.scorer == "regex":
        return lambda reply, answer, item: float(any(
            bounded_search(str(a), reply, what=f"the answer of item {item.get('id')!r} of suite {spec.name!r}")
            for a in _answers(answer)))
    if spec.scorer == "numeric":
        def numeric(reply: str, answer: Any, item: dict[str, Any]) -> float:
            got = last_number(reply)
            if got is None:
                return 0.0
            for a in _answers(answer):
                want = _as_number(a)
                tol = spec.tolerance if spec.tolerance is not None else 1e-6 * max(1.0, abs(want or 0.0))
                if want is not None and abs(got - want) <= tol:
                    return 1.0
            return 0.0
        return numeric
    return _callable_scorer(spec, allow_code=allow_code)


def _callable_scorer(spec: SuiteSpec, *, allow_code: bool) -> Scorer:
    if not allow_code:
        raise AclarenaError(f"suite {spec.name!r} is scored by the Python callable {spec.scorer}, which runs code the "
                            "manifest names; pass --allow-code if you trust this run's aclarena.toml")
    module_name, _, attr = spec.scorer.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        missing = getattr(e, "name", None)
        if missing and not (module_name == missing or module_name.startswith(missing + ".")):
            raise _scorer_failed(spec, module_name, e) from None  # found, but it imports something missing
        raise AclarenaError(f"suite {spec.name!r}: cannot import {module_name} for scorer {spec.scorer} ({e}); "
                            "install it or put its folder on PYTHONPATH") from None
    except Exception as e:  # noqa: BLE001 - the user's module raised while being imported: their file, one line
        raise _scorer_failed(spec, module_name, e) from None
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise AclarenaError(f"suite {spec.name!r}: {module_name} has no function {attr!r} (scorer {spec.scorer})")

    def call(reply: str, answer: Any, item: dict[str, Any]) -> float:
        value = fn(reply, answer, item)
        if isinstance(value, bool):
            return float(value)
        if not isinstance(value, int | float) or not 0.0 <= float(value) <= 1.0:
            raise AclarenaError(f"scorer {spec.scorer} returned {value!r} for item {item.get('id')!r} of suite "
                                f"{spec.name!r}; a scorer returns a bool or a number in [0, 1]")
        return float(value)

    return call


def _scorer_failed(spec: SuiteSpec, module_name: str, e: BaseException) -> AclarenaError:
    """One line naming the user's file and line where importing a scorer module failed (not aclarena's bug)."""
    import traceback

    where = ""
    if isinstance(e, SyntaxError) and e.filename:
        where = f"{e.filename} line {e.lineno}"
    else:
        frames = [f for f in traceback.extract_tb(e.__traceback__) if "importlib" not in f.filename
                  and os.sep + "aclarena" + os.sep not in f.filename]
        if frames:
            where = f"{frames[-1].filename} line {frames[-1].lineno}"
    what = (str(e).strip().splitlines() or [""])[0][:160]
    return AclarenaError(f"suite {spec.name!r}: importing {module_name} for scorer {spec.scorer} failed in your code "
                         f"({where or module_name}: {type(e).__name__}: {what}); fix that file")


REGEX_TIMEOUT_S = 2.0


def bounded_search(pattern: str, text: str, *, what: str, timeout: float | None = None) -> Any:
    """``re.search`` with a time bound: a pattern that backtracks catastrophically (``(a+)+$`` on a long reply)
    hung `eval` with no output; now it is one line naming it. Uses the ``regex`` package (transformers' own
    dependency), whose matcher takes a timeout, in its ``re``-compatible mode."""
    import regex

    try:
        return regex.search(pattern, text, timeout=REGEX_TIMEOUT_S if timeout is None else timeout)
    except TimeoutError:
        shown = pattern if len(pattern) <= 60 else pattern[:57] + "..."
        raise AclarenaError(f"the regular expression {shown!r} ({what}) took over "
                            f"{REGEX_TIMEOUT_S if timeout is None else timeout:g} s on a reply of {len(text)} "
                            "characters (catastrophic backtracking); rewrite it without nested repetition") from None


# --- registry -----------------------------------------------------------------------------------


def check_suite_names(manifest: Manifest) -> None:
    """Refuse suite names that ``--suites`` already means something by."""
    for name in manifest.suites:
        if name in RESERVED:
            raise ManifestError(f"suite name {name!r} is taken by the arena (--suites {name} means "
                                f"{'a group of suites' if name in ('id', 'ood', 'all', 'custom') else 'its suites'}); "
                                "choose another")


def register_suites(manifest: Manifest, run_dir: str | os.PathLike[str], *, allow_code: bool = False) -> list[str]:
    """Make the manifest's suites known to :mod:`aclarena.envs` (replacing any registered before);
    every file is read and checked now. Returns their names."""
    check_suite_names(manifest)
    suites = {name: CustomSuite(spec, run_dir, allow_code=allow_code) for name, spec in manifest.suites.items()}
    _registry.clear()
    _registry.update(suites)
    return list(suites)


def registered() -> Mapping[str, CustomSuite]:
    """The custom suites registered now, by name."""
    return _registry


def custom_suite(name: str) -> CustomSuite | None:
    return _registry.get(name)


def describe(suite: CustomSuite) -> dict[str, Any]:
    """One row for a table of suites."""
    spec = suite.spec
    return {"suite": spec.name, "domain": spec.domain, "role": spec.role, "scorer": spec.scorer,
            "items": len(suite.items), "file": str(suite.file), "sha256": file_sha256(suite.file)}


def file_sha256(path: Path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()


def stale_cell(name: str, settings: Mapping[str, Any]) -> str | None:
    """Why cells made with ``settings`` no longer describe the custom suite ``name`` as it is now (its task file
    edited since, its ``[suites.NAME]`` table changed), or None: what a verb that replays the suite's items
    (`flips`) checks before it pairs the stored outcomes with today's tasks (issue 43)."""
    now = identity(name)
    if now is None:
        return None
    then = settings.get("suite_sha256")
    if then is not None and then != now["suite_sha256"]:
        return (f"suite {name!r}'s task file has changed since these cells were evaluated (SHA-256 {str(then)[:12]}... "
                f"then, {now['suite_sha256'][:12]}... now)")
    if settings.get("fewshot_sha256") != now.get("fewshot_sha256"):
        return f"suite {name!r}'s few-shot file has changed since these cells were evaluated"
    spec = settings.get("suite_spec")
    if spec is not None and spec != now["suite_spec"]:
        return f"suite {name!r}'s [suites.{name}] table has changed since these cells were evaluated"
    return None


def identity(name: str) -> dict[str, Any] | None:
    """What a custom suite's cells depend on besides the eval settings: its spec and its file's bytes
    (so an edited file or scorer is a new cell, never taken for the old one); None for arena suites."""
    suite = _registry.get(name)
    if suite is None:
        return None
    out = {"suite_spec": json.loads(json.dumps(suite.spec.to_dict())), "suite_sha256": file_sha256(suite.file)}
    if suite.fewshot_path is not None:
        out["fewshot_sha256"] = file_sha256(suite.fewshot_path)
    return out
