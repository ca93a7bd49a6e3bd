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

# the classes issue 15 added, each a group of tests (file::name prefix) in tests/reliability
ISSUE15 = (
    ("NaN/inf weights in a later checkpoint of `tokens` (store unchanged)",
     "test_nonfinite_models.py::test_tokens_with_a_nan_later"),
    ("safetensors header, index, tokenizer.json, config.json of the wrong shape: `checkpoints` lists them",
     "test_bad_files.py::test_checkpoints_lists_it"),
    ("the same, through `probe`, `tokens`, `vectors` (one line, store unchanged)", "test_bad_files.py::test_verbs_refuse"),
    ("adapter_config.json of the wrong shape", "test_bad_files.py::test_adapter_config"),
    ("fuzz: every checkpoint and input file reader (hypothesis)", "test_file_fuzz.py::"),
    ("fuzz: every store reader on damaged results.h5 (hypothesis)", "test_store_fuzz.py::test_every_reader"),
    ("store elements of a non-numeric or newer version (lazy ragged included)",
     "test_store_fuzz.py::test_ragged_array_of_a_bad"),
    ("ragged offsets past or not fitting the data", "test_store_fuzz.py::test_offsets_that"),
    ("NUL characters in stored text", "test_store_fuzz.py::test_text_with_nul"),
    ("results.h5 a symbolic link (written through) / dangling (refused)", "test_store_fuzz.py::test_a_"),
    ("monitor series of a newer version or a missing column", "test_store_fuzz.py::test_monitor_series"),
    ("JSONL with U+2028/U+2029/U+0085 inside strings (accepted)", "test_jsonl.py::test_unicode_line"),
    ("lone surrogates, deep nesting in JSONL / lm-eval JSON", "test_jsonl.py::test_l"),
    ("`probe --force` atomic; `tokens` re-checks the probe digest under the lock", "test_probe_force.py::"),
    ("`export`: `--format ,`, a folder where a file goes, full disk", "test_export_failures.py::"),
    ("`dashboard`: port out of range, port in use, bad host", "test_dashboard_address.py::"),
    ("names ending in a newline", "test_manifest_edges.py::test_names_ending"),
    ("`init`: control characters, undecodable bytes in paths", "test_manifest_edges.py::test_init"),
    ("manifest validation linear in chain depth", "test_manifest_edges.py::test_validation_is_linear"),
)


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
    print("| class of bad input or defect (issue 15) | tests | result |")
    print("|---|---|---|")
    for label, prefix in ISSUE15:
        got = [v for k, v in res.items() if k.startswith(prefix.replace(".py::", "::"))]
        n_ok = sum(v == "passed" for v in got)
        tally.update(got)
        mark_all = "✓" if got and n_ok == len(got) else ("?" if not got else "✗")
        print(f"| {label} | `{prefix}` | {mark_all} {n_ok}/{len(got)} |")
    print()
    total = sum(tally.values())
    print(f"Bad-input cases tried: {total}; passed: {tally['passed']}; failed: {tally['failed']}; "
          f"skipped: {tally['skipped']}.")
    suite = Counter(res.values())
    print(f"Whole reliability suite (tests/reliability): {sum(suite.values())} tests; passed: {suite['passed']}; "
          f"failed: {suite['failed']}; skipped: {suite['skipped']}.")


if __name__ == "__main__":
    main(sys.argv[1])
