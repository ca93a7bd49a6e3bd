"""Corrupted expert trajectories for the arena tests: each must score 0."""

from __future__ import annotations

import json
import re
from typing import Any

from aclarena.envs.base import Task, render_tool_call
from aclarena.envs.ecom import PAYMENTS, RETAIL_TOOL_OF, TELECOM_TOOL_OF, expected_db
from aclarena.envs.ifeval import check
from aclarena.envs.rollout import env_of
from aclarena.envs.world import world


def corruptions(task: Task) -> dict[str, list[str]]:
    """Named corruptions of the expert's actions that apply to ``task``."""
    actions = env_of(task).expert_actions(task)
    fn = {"math": _math, "search": _search, "ecom": _ecom, "if": _if, "general": _general}[task.env]
    out = fn(task, actions)
    out["unknown_tool"] = [render_tool_call("delete_everything", {}), *actions]
    out["malformed_call"] = ['<tool_call>{"name": "search", "arguments": {"query": </tool_call>', *actions]
    return out


def _math(task: Task, actions: list[str]) -> dict[str, list[str]]:
    answer = task.data["answer"]
    return {
        "wrong_answer": [re.sub(r"Answer: -?\d+$", f"Answer: {answer + 1}", actions[0])],
        "no_answer_marker": [actions[0].replace("Answer: ", "so ")],
    }


def _general(task: Task, actions: list[str]) -> dict[str, list[str]]:
    wrong = next(L for L in "ABCD" if task.data["answer"] != L)
    return {"wrong_answer": [f"Answer: {wrong}"]}


def _search(task: Task, actions: list[str]) -> dict[str, list[str]]:
    gold = task.data["answer"]
    w = world()
    pool = sorted(set(w.people) | set(w.cities) | set(w.companies) | set(w.rivers) | set(w.countries))
    wrong = next(x for x in pool if x.lower() != gold.lower())
    calls = actions[:-1]
    return {
        "wrong_answer": [*calls, f"Answer: {wrong}"],
        "wrong_tool": [render_tool_call("lookup", {"query": task.data["hops"][0]}), f"Answer: {gold}"],
        "bad_arguments": [render_tool_call("search", {"q": task.data["hops"][0]}), *actions[1:]],
        "no_answer_marker": [*calls, gold],
    }


def _write_index(actions: list[str]) -> int | None:
    for i, a in enumerate(actions):
        m = re.match(r"<tool_call>(.*)</tool_call>$", a)
        if m and json.loads(m.group(1))["name"] in set(RETAIL_TOOL_OF.values()) | set(TELECOM_TOOL_OF.values()):
            return i
    return None


def _ecom(task: Task, actions: list[str]) -> dict[str, list[str]]:
    req = task.data["request"]
    retail = task.variant == "id"
    tool_of = RETAIL_TOOL_OF if retail else TELECOM_TOOL_OF
    out: dict[str, list[str]] = {"do_nothing": ["Sorry, I cannot help with that."]}
    target = {"order_id": req["order_id"]} if retail else {"phone": req["phone"]}
    if not req["allowed"]:
        # act although the policy forbids it (the user, asked, says yes)
        tool = tool_of[req["kind"]]
        args = _write_args(task)
        out["forbidden_action"] = [*actions[:-1], "Shall I go ahead (yes/no)?", render_tool_call(tool, args), "Done."]
        return out
    w = _write_index(actions)
    if not req["confirm"]:
        out["act_after_no"] = [*actions[:-1], render_tool_call(tool_of[req["kind"]], _write_args(task)), "Done."]
        return out
    assert w is not None
    question = w - 1
    out["unconfirmed_write"] = actions[:question] + actions[w:]
    out["claims_done_without_acting"] = [*actions[:w], "Done."]
    other = ("return_order" if tool_of[req["kind"]] == "cancel_order" else "cancel_order") if retail else (
        "resume_line" if tool_of[req["kind"]] == "suspend_line" else "suspend_line")
    if not retail and req["kind"] == "pay":
        other = "suspend_line"
    out["wrong_tool"] = [*actions[:w], render_tool_call(other, target), "Done."]
    wrong_args = _wrong_args(task)
    if wrong_args is not None:
        out["wrong_arguments"] = [*actions[:w], render_tool_call(tool_of[req["kind"]], wrong_args), "Done."]
    return out


def _write_args(task: Task) -> dict[str, Any]:
    from aclarena.envs.ecom import _retail_write_args, _telecom_write_args

    req = task.data["request"]
    return _retail_write_args(req) if task.variant == "id" else _telecom_write_args(req)


def _wrong_args(task: Task) -> dict[str, Any] | None:
    """Arguments that pass validation but lead to a different final database."""
    req = task.data["request"]
    args = _write_args(task)
    kind = req["kind"]
    if task.variant == "id":
        if kind == "address":
            return args | {"address": args["address"] + " 2"}
        if kind == "payment":
            return args | {"method": next(p for p in PAYMENTS if p != args["method"])}
        if kind == "exchange":
            return args | {"new_item_id": args["item_id"]}
        return None
    if kind == "plan":
        return args | {"plan_id": next(p for p in ("basic", "plus", "max") if p != args["plan_id"])}
    if kind == "data":
        return args | {"gb": args["gb"] % 5 + 1}
    return None


def _if(task: Task, actions: list[str]) -> dict[str, list[str]]:
    reply = actions[0]
    out = {}
    for c in task.data["constraints"]:
        bad = _break(reply, c)
        assert not check(bad, c), (c, bad)
        out[f"break_{c['type']}"] = [bad]
    out["off_topic"] = ["Qq zz."]
    return out


def _break(reply: str, c: dict[str, Any]) -> str:
    t = c["type"]
    if t == "lowercase":
        return reply + " Extra."
    if t == "uppercase":
        return reply + " extra"
    if t == "max_words":
        return reply + " and" * (c["n"] + 1)
    if t == "min_words":
        return ""
    if t == "sentences":
        return reply + " One more. And another."
    if t in ("include", "keyword_count"):
        return re.sub(rf"\b{re.escape(c['w'])}\b", "", reply, flags=re.IGNORECASE)
    if t == "exclude":
        return reply + " " + c["w"]
    if t == "json":
        return reply.strip()[1:]
    if t == "bullets":
        return reply + "\n- one more bullet"
    if t == "start":
        return "Well, " + reply
    if t == "end":
        return reply + " Bye now"
    if t == "title":
        return reply.replace("<<", "").replace(">>", "")
    if t == "no_commas":
        return reply + ", indeed"
    if t == "quotes":
        return reply.strip().strip('"')
    if t == "postscript":
        return re.sub(r"p\.s\.", "PS", reply, flags=re.IGNORECASE)
    if t == "paragraphs":
        return reply + "\n\nOne more paragraph."
    if t == "placeholders":
        return re.sub(r"\[[^\]]*\]", "someone", reply)
    raise AssertionError(t)


def final_db_matches(task: Task, state: dict[str, Any]) -> bool:
    return state["db"] == expected_db(task)
