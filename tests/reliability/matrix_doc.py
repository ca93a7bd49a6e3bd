"""Write the bad-input matrix of docs/reliability.md from a JUnit XML report of the reliability suite.

    python -m pytest tests/reliability --junitxml=/tmp/reliability.xml
    python tests/reliability/matrix_doc.py /tmp/reliability.xml > /tmp/matrix.md
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from reliability_helpers import BAD_ARGS, DAMAGES, VERB_ARGV  # noqa: E402


def outcomes(xml: str) -> dict[str, str]:
    out = {}
    for case in ET.parse(xml).getroot().iter("testcase"):
        name = f"{Path(case.get('classname', '').replace('.', '/')).name}::{case.get('name')}"
        status = "passed"
        for child in case:
            if child.tag in ("failure", "error"):
                status = "failed"
            elif child.tag == "skipped":
                status = "skipped"
        out[name] = status
    return out


def main(xml: str) -> None:
    res = outcomes(xml)
    mark = {"passed": "✓", "failed": "✗", "skipped": "s"}

    def get(test: str, cid: str) -> str | None:
        for k, v in res.items():
            if k.endswith(f"{test}[{cid}]"):
                return v
        return None

    verbs = list(VERB_ARGV)
    print("| bad input (issue) | " + " | ".join(f"`{v}`" for v in verbs) + " |")
    print("|---|" + "---|" * len(verbs))
    tally: Counter[str] = Counter()
    for d in DAMAGES:
        cells = []
        for v in verbs:
            st = get("test_damaged_run", f"{v}-{d.apply.__name__}") if v in d.verbs else None
            if v == "eval" and d.apply.__name__ in ("missing_folder", "no_weights", "pickle_only"):
                st = get("test_eval_records_an_unloadable_checkpoint_as_an_error_cell", d.apply.__name__)
                cells.append(f"{mark.get(st, '?')}ᵉ" if st else "—")
            else:
                cells.append(mark.get(st, "?") if st else "—")
            if st:
                tally[st] += 1
        print(f"| {d.name} ({d.issue}) | " + " | ".join(cells) + " |")
    print()
    print("| verb | bad argument (issue) | result |")
    print("|---|---|---|")
    for verb, label, _, _, issue in BAD_ARGS:
        st = get("test_bad_arguments", f"{verb}-{label}")
        tally[st or "missing"] += 1
        print(f"| `{verb}` | {label} ({issue}) | {mark.get(st, '?')} |")
    for verb in ("probe", "eval"):
        st = get("test_engine_vllm_without_vllm", verb)
        tally[st or "missing"] += 1
        print(f"| `{verb}` | `--engine vllm` without vLLM (9) | {mark.get(st, '?')} |")
    print()
    total = sum(tally.values())
    print(f"Bad-input cases tried: {total}; passed: {tally['passed']}; failed: {tally['failed']}; "
          f"skipped: {tally['skipped']}.")
    suite = Counter(res.values())
    print(f"Whole reliability suite (tests/reliability): {sum(suite.values())} tests; passed: {suite['passed']}; "
          f"failed: {suite['failed']}; skipped: {suite['skipped']}.")


if __name__ == "__main__":
    main(sys.argv[1])
