"""The data of a rejection-sampling SFT phase: only environment-verified samples, capped per task, and
expert demonstrations only where pass@k is 0, as the fallback policy says (no model: a scripted policy)."""

import pytest

from aclarena.envs import get_env
from aclarena.envs.experts import expert_trajectory, play
from aclarena.train.data import rejection_phase_data


def scripted(solve_every: int):
    """A policy that solves task i (of the generated train tasks) when i % solve_every == 0, twice in k=3 samples."""
    seen: dict[str, int] = {}

    def sample(model, tok, repeated, seed):
        out = []
        order = list(dict.fromkeys(t.id for t in repeated))
        for t in repeated:
            j = seen[t.id] = seen.get(t.id, -1) + 1
            i = order.index(t.id)
            good = solve_every and i % solve_every == 0 and j < 2
            # the two verified samples differ (the second adds a trailing space): both are distinct records
            out.append(expert_trajectory(t) if good and j == 0 else
                       play(t, [expert_trajectory(t).messages[-1]["content"] + " "]) if good else
                       play(t, ["Answer: 99999"]))
        return out

    return sample


@pytest.mark.parametrize("fallback", ["none", "expert", "expert-if-empty"])
def test_only_verified_samples_and_the_documented_fallbacks(fallback):
    tasks = get_env("math").generate(6, seed=11, split="train", variant="id")
    recs, rep = rejection_phase_data(None, None, "math", 6, 3, 11, max_per_task=0, fallback=fallback,
                                     sample=scripted(2))
    solved = {tasks[i].id for i in (0, 2, 4)}
    samples = [r for r in recs if r["source"] == "sample"]
    experts = [r for r in recs if r["source"] == "expert"]
    assert {r["task_id"] for r in samples} == solved and len(samples) == 6  # 2 distinct verified samples each
    assert not any("99999" in m["content"] for r in recs for m in r["messages"])  # wrong answers never kept
    want_back = {"none": set(), "expert": {tasks[i].id for i in (1, 3, 5)}, "expert-if-empty": set()}[fallback]
    assert {r["task_id"] for r in experts} == want_back == set(rep["fallback_task_ids"])
    assert (rep["tasks"], rep["samples"], rep["correct_samples"], rep["tasks_solved"], rep["kept"]) == (6, 18, 6, 3, 6)
    assert rep["pass_at_k"] == 0.5 and rep["records"] == len(recs) and rep["fallback_tasks"] == len(want_back)


def test_cap_per_task_and_the_bootstrap_when_nothing_is_solved():
    recs, rep = rejection_phase_data(None, None, "math", 6, 3, 11, max_per_task=1, sample=scripted(2))
    assert rep["kept"] == 3 and len({r["task_id"] for r in recs}) == 3
    tasks = get_env("math").generate(6, seed=11, split="train", variant="id")
    recs, rep = rejection_phase_data(None, None, "math", 6, 3, 11, fallback="expert-if-empty", sample=scripted(0))
    assert rep["tasks_solved"] == 0 and rep["fallback_tasks"] == 6
    assert [r["task_id"] for r in recs] == [t.id for t in tasks] and {r["source"] for r in recs} == {"expert"}
    recs, rep = rejection_phase_data(None, None, "math", 6, 3, 11, fallback="none", sample=scripted(0))
    assert recs == [] and rep["records"] == 0
