"""The generated world behind the search environment and the general-knowledge suite.

People, cities, countries, rivers and companies with fictional names (a model cannot know
them from elsewhere), attributes and relations, all drawn from one fixed seed: every
process on every machine sees the same world. Each entity has one short passage; the
``search`` tool ranks passages with BM25 (Robertson & Zaragoza, 2009) and the passages are
also the world's "pretraining text" (:func:`world_corpus`).
"""

from __future__ import annotations

import math
import random
import re
from collections import Counter
from dataclasses import dataclass, field
from functools import lru_cache

WORLD_SEED = 20250
SYLLABLES = ["ka", "lo", "mi", "ra", "ve", "to", "sa", "ne", "ri", "du", "fe", "ga", "jo", "lu", "mo", "pa", "ti",
             "zo", "bel", "dor", "fin", "gar", "hal", "kel", "lin", "mar", "nor", "quen", "ros", "tal", "ven", "wil"]
PROFESSIONS = ["painter", "baker", "pilot", "farmer", "doctor", "teacher", "singer", "miner", "sailor", "writer",
               "judge", "chef"]
COMPANY_SUFFIX = ["Works", "Labs", "Foods", "Motors", "Bank", "Press"]

# relation -> (subject kind, object kind or "value", question templates)
SINGLE_HOP: dict[str, tuple[str, tuple[str, ...]]] = {
    "born_in": ("person", ("In which city was {s} born?", "Where was {s} born?")),
    "profession": ("person", ("What is the profession of {s}?", "What does {s} do for a living?")),
    "works_for": ("person", ("Which company does {s} work for?", "Who employs {s}?")),
    "country": ("city", ("In which country is {s}?", "{s} is a city in which country?")),
    "river": ("city", ("Which river flows through {s}?", "What river runs through {s}?")),
    "founder": ("company", ("Who founded {s}?", "Who is the founder of {s}?")),
    "based_in": ("company", ("Where is {s} based?", "In which city is {s} based?")),
    "founded": ("company", ("In which year was {s} founded?", "When was {s} founded?")),
}
# (first relation, second relation) -> question templates
MULTI_HOP: dict[tuple[str, str], tuple[str, ...]] = {
    ("born_in", "country"): ("In which country was {s} born?",),
    ("born_in", "river"): ("Which river flows through the city where {s} was born?",),
    ("works_for", "based_in"): ("In which city is the company {s} works for based?",),
    ("works_for", "founder"): ("Who founded the company that {s} works for?",),
    ("founder", "born_in"): ("Where was the founder of {s} born?",),
    ("based_in", "country"): ("In which country is {s} based?",),
}


@dataclass
class World:
    people: dict[str, dict[str, str]] = field(default_factory=dict)
    cities: dict[str, dict[str, str]] = field(default_factory=dict)
    companies: dict[str, dict[str, str]] = field(default_factory=dict)
    countries: list[str] = field(default_factory=list)
    rivers: list[str] = field(default_factory=list)
    passages: list[tuple[str, str]] = field(default_factory=list)  # (title, text)

    def entities(self, kind: str) -> dict[str, dict[str, str]]:
        return {"person": self.people, "city": self.cities, "company": self.companies}[kind]

    def fact(self, subject: str, relation: str) -> str:
        for table in (self.people, self.cities, self.companies):
            if subject in table:
                return table[subject][relation]
        raise KeyError(subject)

    def values_of(self, relation: str) -> list[str]:
        """Every distinct value the relation takes (distractors for multiple choice)."""
        kind = SINGLE_HOP[relation][0]
        return sorted({e[relation] for e in self.entities(kind).values()})

    def passage_of(self, title: str) -> str:
        for t, text in self.passages:
            if t == title:
                return text
        raise KeyError(title)


def _word(rng: random.Random, n: int) -> str:
    return "".join(rng.choice(SYLLABLES) for _ in range(n)).capitalize()


def _unique(rng: random.Random, used: set[str], make) -> str:  # type: ignore[no-untyped-def]
    while True:
        w = make()
        if w not in used and all(w not in u and u not in w for u in used):
            used.add(w)
            return w


@lru_cache(maxsize=1)
def world() -> World:
    """The arena's world (built once per process from :data:`WORLD_SEED`)."""
    rng = random.Random(WORLD_SEED)
    used: set[str] = set()
    w = World()
    w.countries = [_unique(rng, used, lambda: _word(rng, 2) + "land") for _ in range(8)]
    w.rivers = [_unique(rng, used, lambda: _word(rng, 2)) + " River" for _ in range(10)]
    city_names = [_unique(rng, used, lambda: _word(rng, rng.choice([2, 3]))) for _ in range(30)]
    for c in city_names:
        w.cities[c] = {"country": rng.choice(w.countries), "river": rng.choice(w.rivers)}
    person_names = [_unique(rng, used, lambda: _word(rng, 2) + " " + _word(rng, 2)) for _ in range(150)]
    company_names = [_unique(rng, used, lambda: _word(rng, 2)) + " " + rng.choice(COMPANY_SUFFIX) for _ in range(30)]
    for co in company_names:
        w.companies[co] = {"founder": rng.choice(person_names), "based_in": rng.choice(city_names),
                           "founded": str(rng.randint(1900, 2020))}
    for p in person_names:
        w.people[p] = {"born_in": rng.choice(city_names), "profession": rng.choice(PROFESSIONS),
                       "works_for": rng.choice(company_names)}
    for p, a in w.people.items():
        w.passages.append((p, f"{p}: {p} is a {a['profession']} born in {a['born_in']} who works for {a['works_for']}."))
    for c, a in w.cities.items():
        w.passages.append((c, f"{c}: {c} is a city in {a['country']} on the {a['river']}."))
    for co, a in w.companies.items():
        w.passages.append((co, f"{co}: {co} was founded by {a['founder']} in {a['founded']} and is based in "
                               f"{a['based_in']}."))
    return w


def world_corpus() -> list[str]:
    """Every passage of the world, for base pretraining text and tokenizer training."""
    return [text for _, text in world().passages]


TOKEN_RE = re.compile(r"[a-z0-9]+")


def tokenize(text: str) -> list[str]:
    return TOKEN_RE.findall(text.lower())


class BM25:
    """Okapi BM25 over a list of documents (k1 = 1.2, b = 0.75)."""

    def __init__(self, docs: list[str], k1: float = 1.2, b: float = 0.75) -> None:
        self.docs = docs
        self.k1, self.b = k1, b
        self.tfs = [Counter(tokenize(d)) for d in docs]
        self.lengths = [sum(tf.values()) for tf in self.tfs]
        self.avgdl = sum(self.lengths) / max(len(docs), 1)
        df: Counter[str] = Counter()
        for tf in self.tfs:
            df.update(tf.keys())
        n = len(docs)
        self.idf = {t: math.log(1 + (n - f + 0.5) / (f + 0.5)) for t, f in df.items()}

    def scores(self, query: str) -> list[float]:
        terms = tokenize(query)
        out = []
        for tf, dl in zip(self.tfs, self.lengths, strict=True):
            s = 0.0
            for t in terms:
                f = tf.get(t, 0)
                if f:
                    s += self.idf[t] * f * (self.k1 + 1) / (f + self.k1 * (1 - self.b + self.b * dl / self.avgdl))
            out.append(s)
        return out

    def top(self, query: str, k: int) -> list[int]:
        """Indices of the ``k`` best documents (score > 0), best first; ties by index."""
        scores = self.scores(query)
        order = sorted(range(len(scores)), key=lambda i: (-scores[i], i))
        return [i for i in order[:k] if scores[i] > 0]


@lru_cache(maxsize=1)
def index() -> BM25:
    return BM25([text for _, text in world().passages])


def search(query: str, k: int = 2) -> list[str]:
    """The ``k`` passages of the world that best match ``query`` (BM25)."""
    w = world()
    return [w.passages[i][1] for i in index().top(query, k)]
