"""What a real base model knows before post-training, as text for the mini base's pretraining.

A pretrained base (the study's Qwen3-8B-Base) arrives at post-training able to copy a name, an
id or a number from its context into an answer or a tool argument, to read a tool's JSON
result, to follow a short instruction and to do small sums in words. A transformer trained
from scratch learns copying (induction heads) from many repeated spans, not from a few hundred
task examples, and the first mini arena showed what its absence costs: the model wrote made-up
names into tool arguments, so search, e-commerce and IF stayed at 0.

Every generator here teaches one of those skills in formats of its own, with made-up names and
ids drawn fresh per example (so the skill is copying, not memorising):

* ``copy_chat``: repeat a phrase, quote it, spell it in capitals, pull an id or a number out of
  a sentence, answer a question from a short note of records;
* ``tool_chain_chat``: generic tools (a library, a parcel service, a restaurant, a bank: none
  of the arena's tools), one to three calls in a row, each argument copied from the user's
  message or from an earlier tool result, then an answer read off the last result;
* ``instruction_chat``: short instructions about the form of a reply to a given text (reply
  with one word, a list with dashes, lowercase, a count), not the IF task's constraints on
  "a few sentences about <topic>";
* ``arithmetic_story``: sums and products in a short narrative with the equation written out,
  not the math task's question-and-``Answer:`` format.

Names are built from the world's syllables (:data:`aclarena.envs.world.SYLLABLES`), so they
tokenize like the arena's entities; they are drawn at random, so they are almost never a name
of the arena's world.
"""

from __future__ import annotations

import json
import random
from typing import Any

from aclarena.envs.base import tool_schema
from aclarena.envs.world import SYLLABLES

HELPFUL = ("You are a helpful assistant.", "You are a helpful assistant. Use the tools when they help.",
           "You are a friendly assistant. Answer briefly.")
FIRST = ("Ada", "Ben", "Cal", "Dee", "Eli", "Fay", "Gus", "Ivy", "Jon", "Kim", "Lou", "Max", "Ned", "Oda", "Pam",
         "Ray", "Sue", "Tom", "Uma", "Vic")
THINGS = ("lamp", "kettle", "chair", "scarf", "clock", "radio", "basket", "jacket", "teapot", "pillow", "bottle",
          "blanket")
COLOURS = ("red", "blue", "green", "black", "white", "grey", "yellow")
NUMBER_WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven",
                "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen", "twenty")


def made_up(rng: random.Random, syllables: int) -> str:
    return "".join(rng.choice(SYLLABLES) for _ in range(syllables)).capitalize()


def person(rng: random.Random) -> str:
    """A made-up full name: two syllable words (as the world's people), or a short first name and one."""
    if rng.random() < 0.6:
        return f"{made_up(rng, 2)} {made_up(rng, 2)}"
    return f"{rng.choice(FIRST)} {made_up(rng, rng.choice((1, 2)))}"


def ident(rng: random.Random) -> str:
    """A made-up id in one of several shapes (``B417``, ``m37``, ``K-2093``, ``555-0142``)."""
    shape = rng.randrange(4)
    if shape == 0:
        return f"{rng.choice('ABCDEFGHKMNPRSTVWXZ')}{rng.randint(10, 999)}"
    if shape == 1:
        return f"{rng.choice('abcdmnpstuvx')}{rng.randint(1, 99)}"
    if shape == 2:
        return f"{rng.choice('KLMNPQRT')}-{rng.randint(1000, 9999)}"
    return f"555-{rng.randint(0, 9999):04d}"


def _chat(rng: random.Random, user: str, reply: str) -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = []
    if rng.random() < 0.7:
        msgs.append({"role": "system", "content": rng.choice(HELPFUL[::2])})
    return msgs + [{"role": "user", "content": user}, {"role": "assistant", "content": reply}]


def copy_chat(rng: random.Random) -> list[dict[str, Any]]:
    """A chat whose answer is copied out of the user's message."""
    kind = rng.randrange(7)
    who, code = person(rng), ident(rng)
    if kind == 0:
        phrase = " ".join(rng.choice((person(rng), made_up(rng, 2), rng.choice(THINGS), code))
                          for _ in range(rng.randint(1, 3)))
        return _chat(rng, rng.choice(("Repeat after me: {p}", "Say this back to me: {p}", "Please repeat: {p}"))
                     .format(p=phrase), phrase)
    if kind == 1:
        return _chat(rng, f"My name is {who}. What is my name?", rng.choice((f"Your name is {who}.", who)))
    if kind == 2:
        thing = f"{rng.choice(COLOURS)} {rng.choice(THINGS)}"
        return _chat(rng, f"The {thing} has the code {code}. What is the code of the {thing}?",
                     rng.choice((code, f"The code is {code}.")))
    if kind == 3:
        rows = [(person(rng), ident(rng), rng.randint(1, 90)) for _ in range(rng.randint(2, 4))]
        note = "\n".join(f"{n}: id {i}, age {a}" for n, i, a in rows)
        n, i, a = rng.choice(rows)
        if rng.random() < 0.5:
            return _chat(rng, f"Here are some records.\n{note}\nWhat is the id of {n}?", i)
        return _chat(rng, f"Here are some records.\n{note}\nHow old is {n}?", f"{n} is {a}.")
    if kind == 4:
        return _chat(rng, f"Put the name {who} in quotes.", json.dumps(who))
    if kind == 5:
        key = rng.choice(("name", "id", "city"))
        value = who if key == "name" else (code if key == "id" else made_up(rng, 2))
        return _chat(rng, f"Write a JSON object whose {key} is {value}.", json.dumps({key: value}))
    city = made_up(rng, rng.choice((2, 3)))
    return _chat(rng, f"{who} moved to {city} last year. Where does {who} live now?",
                 rng.choice((f"{who} lives in {city}.", city)))


# name -> (description, {argument: (type, description)}); none of the arena's tools
GENERIC_TOOLS: dict[str, tuple[str, dict[str, tuple[str, str]]]] = {
    "find_member": ("Find a library member's id by full name.", {"name": ("string", "full name")}),
    "get_member": ("A library member's details.", {"member_id": ("string", "member id")}),
    "get_book": ("A book's details.", {"book_id": ("string", "book id")}),
    "renew_book": ("Renew a borrowed book.", {"book_id": ("string", "book id")}),
    "track_parcel": ("Where a parcel is.", {"parcel_id": ("string", "parcel id")}),
    "find_account": ("Find a bank account by owner name.", {"owner": ("string", "full name")}),
    "get_balance": ("An account's balance.", {"account_id": ("string", "account id")}),
    "book_table": ("Book a table at a restaurant.", {"restaurant": ("string", "restaurant name"),
                                                     "people": ("integer", "number of people")}),
    "send_note": ("Send a short note to a person.", {"to": ("string", "full name"), "text": ("string", "the note")}),
    "get_weather": ("Today's weather in a city.", {"city": ("string", "city name")}),
    "lookup_phone": ("A person's phone number.", {"name": ("string", "full name")}),
    "get_time": ("The local time in a city.", {"city": ("string", "city name")}),
    "convert_money": ("Convert an amount to euros.", {"amount": ("integer", "amount"),
                                                      "currency": ("string", "currency code")}),
}


def _schemas(rng: random.Random, used: list[str]) -> list[dict[str, Any]]:
    """The tools offered: the ones used plus a few others, in a random order."""
    others = [t for t in GENERIC_TOOLS if t not in used]
    names = used + rng.sample(others, rng.randint(0, min(3, len(others))))
    rng.shuffle(names)
    return [tool_schema(t, GENERIC_TOOLS[t][0], GENERIC_TOOLS[t][1]) for t in names]


def _call(name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"role": "assistant", "content": "", "tool_calls": [{"type": "function",
                                                                "function": {"name": name, "arguments": args}}]}


def _result(obj: Any) -> dict[str, Any]:
    return {"role": "tool", "content": json.dumps(obj, separators=(",", ":"))}


def tool_chain_chat(rng: random.Random) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """A generic tool-use chat: 1-3 calls, each argument copied from the request or an earlier result."""
    kind = rng.randrange(6)
    who = person(rng)
    sys_msg = {"role": "system", "content": rng.choice(HELPFUL[1:])}
    if kind == 0:  # library: name -> member id -> member -> book
        mid, books = ident(rng), [ident(rng) for _ in range(rng.randint(1, 3))]
        title = f"The {rng.choice(COLOURS).capitalize()} {made_up(rng, 2)}"
        book = rng.choice(books)
        msgs = [sys_msg, {"role": "user", "content": f"Hi, I'm {who}. Which books do I have on loan?"},
                _call("find_member", {"name": who}), _result({"member_id": mid}),
                _call("get_member", {"member_id": mid}), _result({"member_id": mid, "name": who, "books": books})]
        if rng.random() < 0.5:
            msgs += [_call("get_book", {"book_id": book}),
                     _result({"book_id": book, "title": title, "due": f"May {rng.randint(1, 28)}"})]
            msgs.append({"role": "assistant", "content": f"You have {len(books)} book(s); {book} is {title}."})
        else:
            msgs.append({"role": "assistant", "content": f"You have {len(books)} book(s): {', '.join(books)}."})
        return msgs, _schemas(rng, ["find_member", "get_member", "get_book"])
    if kind == 1:  # bank: owner -> account -> balance
        acc, bal = ident(rng), rng.randint(0, 999)
        msgs = [sys_msg, {"role": "user", "content": f"What is the balance of {who}'s account?"},
                _call("find_account", {"owner": who}), _result({"account_id": acc}),
                _call("get_balance", {"account_id": acc}), _result({"account_id": acc, "balance": bal}),
                {"role": "assistant", "content": f"Account {acc} of {who} has {bal} euros."}]
        return msgs, _schemas(rng, ["find_account", "get_balance"])
    if kind == 2:  # parcel: id from the request, status from the result
        pid, city = ident(rng), made_up(rng, 2)
        status = rng.choice(("in transit", "delivered", "at the depot"))
        msgs = [sys_msg, {"role": "user", "content": f"Where is my parcel {pid}?"},
                _call("track_parcel", {"parcel_id": pid}), _result({"parcel_id": pid, "status": status, "city": city}),
                {"role": "assistant", "content": f"Parcel {pid} is {status} in {city}."}]
        return msgs, _schemas(rng, ["track_parcel"])
    if kind == 3:  # two arguments copied at once
        place, people = f"{made_up(rng, 2)} {rng.choice(('Grill', 'Cafe', 'Kitchen'))}", rng.randint(2, 9)
        ref = ident(rng)
        msgs = [sys_msg, {"role": "user", "content": f"Please book a table for {people} at {place}."},
                _call("book_table", {"restaurant": place, "people": people}),
                _result({"booking": ref, "restaurant": place, "people": people}),
                {"role": "assistant", "content": f"Booked: a table for {people} at {place}, reference {ref}."}]
        return msgs, _schemas(rng, ["book_table"])
    if kind == 4:  # a refusal read off the result: nothing found
        msgs = [sys_msg, {"role": "user", "content": f"What is the phone number of {who}?"},
                _call("lookup_phone", {"name": who}), _result({"error": "not found"}),
                {"role": "assistant", "content": f"Sorry, I found no number for {who}."}]
        return msgs, _schemas(rng, ["lookup_phone"])
    to, text = person(rng), rng.choice(("see you at noon", "thanks for the book", "call me back", "all done"))
    msgs = [sys_msg, {"role": "user", "content": f"Send {to} a note that says: {text}"},
            _call("send_note", {"to": to, "text": text}), _result({"sent": True}),
            {"role": "assistant", "content": f"Sent your note to {to}."}]
    return msgs, _schemas(rng, ["send_note"])


def instruction_chat(rng: random.Random) -> list[dict[str, Any]]:
    """A short instruction about the form of the reply to a given text."""
    words = [rng.choice(THINGS) for _ in range(rng.randint(2, 4))]
    phrase = f"the {rng.choice(COLOURS)} {rng.choice(THINGS)} is {rng.choice(('new', 'old', 'small', 'big'))}"
    kind = rng.randrange(6)
    if kind == 0:
        return _chat(rng, f"Write this in capital letters: {phrase}", phrase.upper())
    if kind == 1:
        return _chat(rng, f"Write this in small letters: {phrase.upper()}", phrase)
    if kind == 2:
        return _chat(rng, f"Make a list with a dash before each item: {', '.join(words)}",
                     "\n".join(f"- {w}" for w in words))
    if kind == 3:
        return _chat(rng, f"How many words are in this text: {phrase}", str(len(phrase.split())))
    if kind == 4:
        w = rng.choice(words)
        return _chat(rng, f"Reply with only the word {w}.", w)
    return _chat(rng, f"Start your reply with 'Sure' and then repeat: {phrase}", f"Sure. {phrase.capitalize()}.")


def arithmetic_story(rng: random.Random) -> str:
    """One or two steps of arithmetic in a short narrative, the equation written out."""
    who, thing = rng.choice(FIRST), rng.choice(THINGS) + "s"
    a, b = rng.randint(1, 12), rng.randint(1, 9)
    op = rng.choice(("+", "-", "*"))
    if op == "-" and b > a:
        a, b = b, a
    c = a + b if op == "+" else (a - b if op == "-" else a * b)
    verb = {"+": f"got {b} more", "-": f"gave away {b}", "*": f"ended up with {b} times as many"}[op]
    text = f"{who} had {a} {thing} and {verb}, so {who} had {a} {op} {b} = {c} {thing}."
    if rng.random() < 0.5 and c <= 30:
        d = rng.randint(1, 9)
        if rng.random() < 0.5 or d > c:
            text += f" Then {who} got {d} more: {c} + {d} = {c + d}."
        else:
            text += f" Then {who} lost {d}: {c} - {d} = {c - d}."
    if rng.random() < 0.3:
        text += f" In words, {NUMBER_WORDS[min(a, 20)]} and {NUMBER_WORDS[min(b, 20)]} make {c}." if op == "+" else ""
    return text


def skill_texts(tokenizer: Any, *, copy: int, tools: int, instructions: int, arithmetic: int,
                seed: int) -> list[str]:
    """The four skill sets as chat-template text (arithmetic as plain text), ``seed``-deterministic."""
    rng = random.Random(seed * 7919 + 13)
    texts = [tokenizer.apply_chat_template(copy_chat(rng), tokenize=False) for _ in range(copy)]
    for _ in range(tools):
        msgs, schemas = tool_chain_chat(rng)
        texts.append(tokenizer.apply_chat_template(msgs, tools=schemas, tokenize=False))
    texts += [tokenizer.apply_chat_template(instruction_chat(rng), tokenize=False) for _ in range(instructions)]
    texts += ["\n".join(arithmetic_story(rng) for _ in range(3)) for _ in range(arithmetic)]
    return texts
