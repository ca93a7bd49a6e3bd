"""Sample tasks and expert trajectories of every suite, as Markdown for docs/arena.md.

``python -m aclarena.envs.samples docs/arena.md`` rewrites the generated block of that file
(between the two marker comments); a test checks that the block is current.
"""

from __future__ import annotations

import sys
from pathlib import Path

from aclarena.envs import SUITES, sample_tasks
from aclarena.envs.experts import expert_trajectory

BEGIN = "<!-- BEGIN GENERATED SAMPLES (python -m aclarena.envs.samples docs/arena.md) -->"
END = "<!-- END GENERATED SAMPLES -->"
# Which eval-split task (seed 0) each suite shows: one that exercises the interesting path.
PICK = {"ecom/id": lambda t: t.data["request"]["kind"] == "exchange" and t.data["request"]["allowed"]
        and t.data["request"]["confirm"],
        "ecom/ood": lambda t: not t.data["request"]["allowed"],
        "if/id": lambda t: len(t.data["constraints"]) == 2,
        "if/ood": lambda t: len(t.data["constraints"]) == 2}


def _fence(text: str) -> str:
    return "```text\n" + text.rstrip("\n") + "\n```"


def render_samples() -> str:
    """One sample per suite: identity (system prompt and tools), the user message, the expert's trajectory."""
    parts = [BEGIN, ""]
    for suite in SUITES:
        tasks = sample_tasks(suite, 40, seed=0)
        task = next((t for t in tasks if PICK.get(suite, lambda _t: True)(t)), tasks[0])
        traj = expert_trajectory(task)
        parts.append(f"### `{suite}`")
        parts.append("")
        parts.append(f"Task `{task.id}` (eval split, seed 0). System prompt:")
        parts.append("")
        parts.append(_fence(task.system))
        if task.tools:
            lines = []
            for t in task.tools:
                f = t["function"]
                lines.append(f"{f['name']}({', '.join(f['parameters']['properties'])}): {f['description']}")
            parts.append("")
            parts.append(f"Tools ({len(task.tools)}):")
            parts.append("")
            parts.append(_fence("\n".join(lines)))
        parts.append("")
        parts.append("Expert trajectory:")
        parts.append("")
        body = [f"[{m['role']}] {m['content']}" for m in traj.messages[1:]]
        parts.append(_fence("\n".join(body)))
        parts.append("")
        metrics = ", ".join(f"{k} {v:g}" for k, v in traj.metrics.items())
        parts.append(f"Outcome: {metrics}.")
        parts.append("")
    parts.append(END)
    return "\n".join(parts)


def update(path: str | Path) -> bool:
    """Rewrite the generated block of ``path``; returns whether it changed."""
    path = Path(path)
    text = path.read_text(encoding="utf-8")
    if BEGIN not in text or END not in text:
        raise SystemExit(f"{path} has no generated-samples markers")
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    new = head + render_samples() + tail
    if new != text:
        path.write_text(new, encoding="utf-8")
        return True
    return False


def current_block(path: str | Path) -> str:
    text = Path(path).read_text(encoding="utf-8")
    return BEGIN + text.split(BEGIN, 1)[1].split(END, 1)[0] + END


if __name__ == "__main__":
    for p in sys.argv[1:]:
        print(f"{p}: {'updated' if update(p) else 'current'}")
