"""Instruction following: short writing tasks with verifiable constraints (the IF-Eval / IF-Bench role).

A task asks for a few sentences about a topic under one or more constraints, each
checked by a small function of the reply (IF-Eval's "strict" checks, Zhou et al. 2023).
In-domain: one or two constraints of 12 types (case, word and sentence counts,
include/exclude keywords, JSON output, bullet counts, start/end phrases, a title).
Out-of-domain (the IF-Bench role): 6 types never seen in training (no commas, quotation,
postscript, keyword frequency, paragraphs, placeholders), alone or beside seen types,
and combinations of three seen types.

Numeric parameters (how many words, sentences...) are measured on the reply the generator
plans for the task, so every task is satisfiable; the checkers never see that plan.

Reward: every constraint satisfied (IF-Eval's prompt-level strict accuracy) by a reply that
is about the topic (it uses one of the topic's content words, so that an empty or
off-topic reply cannot satisfy an exclusion-only prompt); the share of constraints
satisfied is reported as ``instruction_acc``.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable
from typing import Any

from aclarena.envs.base import Environment, Task, Trajectory

TOPICS: dict[str, list[str]] = {
    "the ocean": ["The ocean is deep and blue.", "Waves roll onto the sand.", "Fish swim in the cold water.",
                  "At night, the sea looks dark.", "Boats sail far from the shore.", "Salt makes the water heavy."],
    "a garden": ["The garden is full of flowers.", "Bees fly from rose to rose.", "Tomatoes grow near the fence.",
                 "In spring, the grass turns green.", "A small path leads to a bench.", "Rain helps the plants grow."],
    "coffee": ["Coffee starts as a red berry.", "The beans are roasted until brown.", "Hot water brings out the taste.",
               "In the morning, many people drink it.", "Milk makes it soft and sweet.", "Strong coffee keeps you awake."],
    "trains": ["Trains run on steel rails.", "A long train carries many people.", "The station is busy at noon.",
               "At night, the train lights shine.", "Old trains used coal and steam.", "Fast trains cross the country."],
    "winter": ["Winter is the coldest season.", "Snow covers the roofs.", "Children build a snowman.",
               "At dusk, the lakes freeze.", "People wear thick coats.", "Hot soup tastes good in the cold."],
    "music": ["Music can make people dance.", "A piano has black and white keys.", "Drums keep the beat.",
              "At a concert, the crowd sings along.", "Some songs are very old.", "A quiet tune helps you rest."],
    "cats": ["Cats sleep for most of the day.", "A cat can jump very high.", "Kittens like to play with string.",
             "At night, cats see well.", "Many cats dislike water.", "A happy cat purrs softly."],
    "the moon": ["The moon circles the earth.", "Its light comes from the sun.", "The moon has many craters.",
                 "At times, it looks like a thin line.", "People walked on it long ago.", "The tides follow the moon."],
    "bread": ["Bread is made from flour and water.", "Yeast makes the dough rise.", "The oven turns it golden.",
              "In many homes, bread is eaten daily.", "Fresh bread smells warm.", "A crust keeps the inside soft."],
    "rain": ["Rain falls from grey clouds.", "Puddles form on the road.", "Plants drink the water.",
             "After a storm, the air smells fresh.", "An umbrella keeps you dry.", "Heavy rain can flood rivers."],
    "books": ["Books hold many stories.", "A library lends books for free.", "Some books teach new skills.",
              "On long trips, a book is good company.", "Old books have yellow pages.", "Reading makes the mind grow."],
    "mountains": ["Mountains rise high above the land.", "Snow stays on the tallest peaks.", "Goats climb the steep rocks.",
                  "In summer, hikers walk the trails.", "The air is thin at the top.", "Rivers begin in the hills."],
}
INCLUDE_WORDS = ["friendship", "history", "silence", "journey", "colour", "wonder", "memory", "freedom"]
COUNT_WORDS = ["calm", "bright", "gentle", "simple", "lovely"]
START_PHRASES = ["Here is my answer:", "My reply follows:", "As you asked:"]
END_PHRASES = ["That is all.", "Thank you for reading.", "I hope this helps."]
STOPWORDS = {"the", "and", "from", "with", "that", "this", "many", "most", "very", "makes", "make", "until", "near",
             "onto", "above", "some", "keeps", "long", "there", "their"}
PLACEHOLDER_SENTENCE = "Send it to [name] at [address]."
POSTSCRIPT = "P.S. Write back soon."

ID_TYPES = ("lowercase", "uppercase", "max_words", "min_words", "sentences", "include", "exclude", "json", "bullets",
            "start", "end", "title")
OOD_TYPES = ("no_commas", "quotes", "postscript", "keyword_count", "paragraphs", "placeholders")
CONFLICTS = {
    frozenset(p) for p in [
        ("lowercase", "uppercase"), ("uppercase", "json"),
        ("json", "quotes"), ("json", "start"), ("json", "end"), ("json", "title"), ("json", "postscript"),
        ("json", "bullets"), ("json", "paragraphs"), ("quotes", "start"), ("quotes", "end"), ("end", "postscript"),
        ("start", "title"), ("sentences", "postscript"), ("bullets", "paragraphs"), ("quotes", "postscript"),
        ("sentences", "placeholders"), ("quotes", "title"), ("include", "keyword_count"), ("quotes", "bullets"),
    ]
}
SYSTEM = "You are a writing assistant. Follow every instruction about the form of your reply exactly."
WORD_RE = re.compile(r"[A-Za-z0-9']+")


def words(text: str) -> list[str]:
    return WORD_RE.findall(text)


def count_sentences(text: str) -> int:
    """Pieces between ``.``, ``!`` and ``?`` that contain a letter."""
    return sum(1 for piece in re.split(r"[.!?]+", text) if re.search(r"[A-Za-z]", piece))


def count_word(text: str, word: str) -> int:
    return len(re.findall(rf"\b{re.escape(word)}\b", text, flags=re.IGNORECASE))


def _strip_fence(text: str) -> str:
    t = text.strip()
    m = re.fullmatch(r"```(?:json)?\s*(.*?)\s*```", t, flags=re.DOTALL)
    return m.group(1) if m else t


def _is_json_answer(text: str) -> bool:
    try:
        value = json.loads(_strip_fence(text))
    except ValueError:
        return False
    return isinstance(value, dict) and isinstance(value.get("answer"), str)


def _bullets(text: str) -> int:
    return sum(1 for line in text.splitlines() if re.match(r"^\s*[-*] ", line))


def _paragraphs(text: str) -> int:
    return sum(1 for p in re.split(r"\n\s*\n", text.strip()) if p.strip())


# type -> (instruction, check(reply, params))
CONSTRAINTS: dict[str, tuple[str, Callable[[str, dict[str, Any]], bool]]] = {
    "lowercase": ("Use only lowercase letters.",
                  lambda r, p: r == r.lower() and bool(re.search(r"[a-z]", r))),
    "uppercase": ("Write everything in capital letters.",
                  lambda r, p: r == r.upper() and bool(re.search(r"[A-Z]", r))),
    "max_words": ("Use at most {n} words.", lambda r, p: 0 < len(words(r)) <= p["n"]),
    "min_words": ("Use at least {n} words.", lambda r, p: len(words(r)) >= p["n"]),
    "sentences": ("Write exactly {n} sentences.", lambda r, p: count_sentences(r) == p["n"]),
    "include": ("Include the word '{w}'.", lambda r, p: count_word(r, p["w"]) > 0),
    "exclude": ("Do not use the word '{w}'.", lambda r, p: count_word(r, p["w"]) == 0 and bool(r.strip())),
    "json": ('Give the whole reply as JSON with the key "answer".', lambda r, p: _is_json_answer(r)),
    "bullets": ("Use exactly {n} bullet points starting with '- '.", lambda r, p: _bullets(r) == p["n"]),
    "start": ("Start your reply with '{p}'.", lambda r, p: r.strip().lower().startswith(p["p"].lower())),
    "end": ("End your reply with '{p}'.", lambda r, p: r.strip().lower().endswith(p["p"].lower())),
    "title": ("Add a title in double angular brackets, like <<title>>.",
              lambda r, p: bool(re.search(r"<<[^\n<>]+>>", r))),
    "no_commas": ("Do not use any commas.", lambda r, p: "," not in r and bool(r.strip())),
    "quotes": ("Wrap your whole reply in double quotes.",
               lambda r, p: len(r.strip()) > 2 and r.strip()[0] == '"' and r.strip()[-1] == '"'),
    "postscript": ("Add a postscript at the end starting with P.S.",
                   lambda r, p: bool(re.search(r"^\s*p\.s\.", r, flags=re.IGNORECASE | re.MULTILINE))),
    "keyword_count": ("Use the word '{w}' exactly {n} times.", lambda r, p: count_word(r, p["w"]) == p["n"]),
    "paragraphs": ("Write exactly {n} paragraphs separated by blank lines.", lambda r, p: _paragraphs(r) == p["n"]),
    "placeholders": ("Include at least {n} placeholders in square brackets, like [name].",
                     lambda r, p: len(re.findall(r"\[[^\[\]\n]+\]", r)) >= p["n"]),
}


def instruction(c: dict[str, Any]) -> str:
    text, _ = CONSTRAINTS[c["type"]]
    return text.format(**{k: v for k, v in c.items() if k != "type"})


def check(reply: str, c: dict[str, Any]) -> bool:
    """Whether ``reply`` satisfies constraint ``c`` (a dict with ``type`` and its parameters)."""
    return bool(CONSTRAINTS[c["type"]][1](reply, c))


def build_reply(topic: str, sentence_ids: list[int], cons: dict[str, dict[str, Any]]) -> str:
    """The planned reply: the chosen sentences, then structure, decorations, case and wrapping."""
    sents = [TOPICS[topic][i] for i in sentence_ids]
    if "include" in cons:
        sents.append(f"It makes me think of {cons['include']['w']}.")
    if "keyword_count" in cons:
        sents.extend([f"It feels {cons['keyword_count']['w']}."] * cons["keyword_count"]["n"])
    if "placeholders" in cons:
        sents.append(PLACEHOLDER_SENTENCE)
    if "no_commas" in cons:
        sents = [s.replace(",", "") for s in sents]
    block = "bullets" in cons or "paragraphs" in cons
    if "bullets" in cons:
        body = "\n".join("- " + s for s in sents)
    elif "paragraphs" in cons:
        n = cons["paragraphs"]["n"]
        groups = [sents[i::n] for i in range(n)]
        body = "\n\n".join(" ".join(g) for g in groups)
    else:
        body = " ".join(sents)
    if "title" in cons:
        body = f"<<{topic.title()}>>\n" + body
    sep = "\n" if block else " "
    if "start" in cons:
        body = cons["start"]["p"] + sep + body
    if "end" in cons:
        body = body + sep + cons["end"]["p"]
    if "postscript" in cons:
        body = body + "\n" + POSTSCRIPT
    if "lowercase" in cons:
        body = body.lower()
    if "uppercase" in cons:
        body = body.upper()
    if "json" in cons:
        body = json.dumps({"answer": body}, ensure_ascii=False)
    if "quotes" in cons:
        body = f'"{body}"'
    return body


def _exclude_candidates(topic: str) -> list[str]:
    bank = TOPICS[topic]
    counts: dict[str, int] = {}
    for s in bank:
        for w in {w.lower() for w in words(s)}:
            counts[w] = counts.get(w, 0) + 1
    # never a word the reply's fixed parts (title, phrases, added sentences) may contain
    fixed = {w.lower() for text in [topic, *START_PHRASES, *END_PHRASES, PLACEHOLDER_SENTENCE, POSTSCRIPT,
                                     "It makes me think of", "It feels"] for w in words(text)}
    return sorted(w for w, c in counts.items() if len(w) >= 4 and w not in STOPWORDS | fixed and c <= 2)


def topic_words(topic: str) -> set[str]:
    """Content words of a topic's sentences (4+ letters, not stop words)."""
    return {w.lower() for s in TOPICS[topic] for w in words(s) if len(w) >= 4 and w.lower() not in STOPWORDS}


def on_topic(reply: str, topic: str) -> bool:
    """Whether the reply uses at least one content word of the topic."""
    return bool({w.lower() for w in words(reply)} & topic_words(topic))


def _compatible(types: list[str]) -> bool:
    return all(frozenset((a, b)) not in CONFLICTS for i, a in enumerate(types) for b in types[i + 1:])


class IfEnv(Environment):
    name = "if"
    max_turns = 1
    max_new_tokens = 96

    def system_prompt(self, variant: str) -> str:
        return SYSTEM

    def _types(self, rng: random.Random, variant: str) -> list[str]:
        while True:
            if variant == "id":
                types = rng.sample(ID_TYPES, rng.randint(1, 2))
            elif rng.random() < 0.7:
                types = [rng.choice(OOD_TYPES)] + rng.sample(ID_TYPES, rng.randint(0, 1))
            else:
                types = rng.sample(ID_TYPES, 3)
            if _compatible(types):
                return types

    def _candidate(self, rng: random.Random, variant: str) -> tuple[str, str, dict[str, Any]]:
        topic = rng.choice(sorted(TOPICS))
        types = self._types(rng, variant)
        cons: dict[str, dict[str, Any]] = {t: {"type": t} for t in types}
        n_sent = rng.randint(2, 4) if ("bullets" in cons or "paragraphs" in cons) else rng.randint(1, 3)
        pool = list(range(len(TOPICS[topic])))
        if "exclude" in cons:
            word = rng.choice(_exclude_candidates(topic))
            cons["exclude"]["w"] = word
            pool = [i for i in pool if count_word(TOPICS[topic][i], word) == 0]
        sentence_ids = rng.sample(pool, min(n_sent, len(pool)))
        if "paragraphs" in cons:
            cons["paragraphs"]["n"] = rng.randint(2, len(sentence_ids))
        if "include" in cons:
            cons["include"]["w"] = rng.choice(INCLUDE_WORDS)
        if "keyword_count" in cons:
            cons["keyword_count"] |= {"w": rng.choice(COUNT_WORDS), "n": rng.randint(2, 3)}
        if "placeholders" in cons:
            cons["placeholders"]["n"] = rng.randint(1, 2)
        if "start" in cons:
            cons["start"]["p"] = rng.choice(START_PHRASES)
        if "end" in cons:
            cons["end"]["p"] = rng.choice(END_PHRASES)
        reply = build_reply(topic, sentence_ids, cons)
        # counts measured on the planned reply: satisfiable by construction
        if "max_words" in cons:
            cons["max_words"]["n"] = len(words(reply)) + rng.randint(0, 5)
        if "min_words" in cons:
            cons["min_words"]["n"] = max(1, len(words(reply)) - rng.randint(0, 5))
        if "sentences" in cons:
            cons["sentences"]["n"] = count_sentences(reply)
        if "bullets" in cons:
            cons["bullets"]["n"] = _bullets(reply)
        constraints = [cons[t] for t in types]
        prompt = f"Write a few sentences about {topic}. " + " ".join(instruction(c) for c in constraints)
        data = {"topic": topic, "sentence_ids": sentence_ids, "constraints": constraints}
        return "if|" + prompt, prompt, data

    def expert_actions(self, task: Task) -> list[str]:
        cons = {c["type"]: dict(c) for c in task.data["constraints"]}
        return [build_reply(task.data["topic"], list(task.data["sentence_ids"]), cons)]

    def score(self, task: Task, trajectory: Trajectory) -> dict[str, float]:
        reply = trajectory.final_text
        results = [check(reply, c) for c in task.data["constraints"]]
        topical = on_topic(reply, task.data["topic"])
        ok = all(results) and bool(results) and topical and trajectory.n_failed == 0
        return {"reward": float(ok), "instruction_acc": sum(results) / max(len(results), 1),
                "on_topic": float(topical)}
