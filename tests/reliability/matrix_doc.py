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

from reliability_helpers import BAD_ARGS, DAMAGES, FLIPS_CASES, VERB_ARGV  # noqa: E402

# the classes issue 15 added, each a group of tests (file::name prefix) in tests/reliability
ISSUE15 = (
    ("NaN/inf weights in a later checkpoint of `tokens` (store unchanged)",
     "test_nonfinite_models.py::test_tokens_with_a_nan_later"),
    ("safetensors header, index, tokenizer.json, config.json, tokenizer_config.json, special_tokens_map.json, "
     "generation_config.json, chat_template.json of the wrong shape: `checkpoints` lists them",
     "test_bad_files.py::test_checkpoints_lists_it"),
    ("the same, through `probe`, `tokens`, `vectors` (one line, store unchanged), and `load_tokenizer`",
     ("test_bad_files.py::test_verbs_refuse", "test_bad_files.py::test_load_tokenizer")),
    ("adapter_config.json of the wrong shape", "test_bad_files.py::test_adapter_config"),
    ("fuzz: every checkpoint and input file reader (hypothesis)", "test_file_fuzz.py::"),
    ("fuzz: every store reader on damaged results.h5 (hypothesis)", "test_store_fuzz.py::test_every_reader"),
    ("store elements of a non-numeric or newer version (lazy ragged included)",
     "test_store_fuzz.py::test_ragged_array_of_a_bad"),
    ("ragged offsets past or not fitting the data", "test_store_fuzz.py::test_offsets_that"),
    ("NUL characters in stored text", "test_store_fuzz.py::test_text_with_nul"),
    ("`eval` with a model that generates NUL (was exit 3)", "test_eval_nul.py::"),
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
    ("`--engine vllm`: NaN/inf weights refused before vLLM builds an engine (stand-in vllm; the check itself)",
     ("test_nonfinite_adapters_vllm.py::test_vllm_engine_is_never_built",
      "test_nonfinite_adapters_vllm.py::test_load_llm_checks", "test_nonfinite_adapters_vllm.py::test_check_finite")),
    ("LoRA adapter with NaN/inf weights: `tokens`, `vectors`, `displacement`, `eval`, peft serving, merging, vLLM "
     "serving (backbone too)",
     ("test_nonfinite_adapters_vllm.py::test_tokens_refuses_an_adapter",
      "test_nonfinite_adapters_vllm.py::test_other_verbs_refuse_an_adapter",
      "test_nonfinite_adapters_vllm.py::test_serving_and_merging", "test_nonfinite_adapters_vllm.py::test_vllm_expert")),
    ("adapter_config.json not an object, of wrong types, contradicting its weights or naming another base: "
     "`checkpoints`, `tokens`, serving, merging", ("test_nonfinite_adapters_vllm.py::test_adapter_config_checks",
                                                  "test_nonfinite_adapters_vllm.py::test_a_copy_of_the_base")),
    ("a flips result of the wrong shape (read back by `flips`, the dashboard, `export`)",
     ("test_store_fuzz.py::test_flips_result", "test_store_fuzz.py::test_the_flips_reader",
      "test_store_fuzz.py::test_the_flips_summary")),
    ("routing reports and MLE routes of the wrong shape (the Router page, `export`, `compare`)",
     ("test_store_fuzz.py::test_routing_results", "test_store_fuzz.py::test_the_routing_readers")),
    ("monitor session settings that are not a JSON object", "test_store_fuzz.py::test_monitor_session_settings"),
)


# the classes of issue 33, each a group of tests in tests/reliability (and the browser test)
ISSUE33 = (
    ("a name checked before any write: `consolidate --name` of every method and the names derived from it "
     "(merge-ta's NAME-l0.5), `..`, absolute, hidden, `a/b`, a stage checkpoint or its folder; the library check",
     ("test_output_names_checked_first.py::test_consolidate_checks_every_name", "test_output_names_checked_first.py::test_output_folder")),
    ("config.json against the safetensors headers (layers, hidden, vocab, intermediate, heads, kv heads, untied "
     "head): `checkpoints`", "test_config_against_headers.py::test_checkpoints_compares_config"),
    ("the same through `tokens` (one line, no LOAD REPORT, store unchanged); sharded folders, an adapter on a "
     "lying base, healthy tied/untied and Llama checkpoints",
     ("test_config_against_headers.py::test_tokens_refuses_a_lying", "test_config_against_headers.py::test_sharded", "test_config_against_headers.py::test_untied")),
    ("one loader error path: a library's own error (transformers' config validation) in one line, exit 1",
     "test_loader_errors_one_line.py::test_a_library_error"),
    ("pickle that torch's weights_only refuses, with --allow-pickle: not loadable, one line, exit 1",
     "test_loader_errors_one_line.py::test_pickle_weights_only"),
    ("hub ids: not in the local cache fails at once; a cached one is inspected and loads offline",
     ("test_hub_ids_offline.py::test_a_hub_id", "test_hub_ids_offline.py::test_a_cached_hub_id")),
    ("stored results of a newer major result-version refused (probe set through `tokens`; every reader)",
     ("test_result_versions.py::test_a_probe_set_of_a_newer", "test_result_versions.py::test_every_stored_result")),
    ("the dashboard on a truncated results.h5: every page's layout, the navigation and a page callback",
     "test_dashboard_damaged_store.py::test_every_dashboard_page"),
)


# the classes of issue 43, each a group of tests in tests/reliability
ISSUE43 = (
    ("`import --force` deletes only an earlier import (a run folder, a file, a folder of other files refused); "
     "a killed import's staging folder removed; no tqdm bar in a piped log",
     ("test_force_keeps_what_it_did_not_make.py::test_import_force", "test_force_keeps_what_it_did_not_make.py::test_a_killed_import", "test_force_keeps_what_it_did_not_make.py::test_import_draws")),
    ("`eval --force` never replaces a good cell with an error cell", "test_force_keeps_what_it_did_not_make.py::test_eval_force"),
    ("one write lock per run: two `repair`s at once keep both manifest entries; `init --add` never drops an "
     "entry written meanwhile", ("test_one_writer_at_a_time.py::test_two_repairs", "test_one_writer_at_a_time.py::test_init_add")),
    ("staging folders of unique names, dead writers' swept; publishing checked under the lock (`repair`, "
     "`consolidate`); a repair killed after publishing can be rerun",
     ("test_one_writer_at_a_time.py::test_staging_folders", "test_one_writer_at_a_time.py::test_a_folder_another_writer", "test_one_writer_at_a_time.py::test_repair_killed")),
    ("writes outside the run: a `checkpoints/` linked outside refused; a linked results.h5's stale temporary "
     "removed", ("test_one_writer_at_a_time.py::test_a_symlinked", "test_one_writer_at_a_time.py::test_a_linked_results")),
    ("results.h5 held open by another process named so (not 'corrupted')", "test_one_writer_at_a_time.py::test_results_h5_open"),
    ("bounded readers: TOML nesting (manifest, training config), UTF-8 BOM accepted, JSON integers over 4,300 "
     "digits, a suite path that is a folder, a numeric answer beyond a float, a scorer module that fails to "
     "import, a backtracking regex answer, a GGUF whose metadata contradicts its tensors",
     ("test_bounded_readers.py::test_a_deeply", "test_bounded_readers.py::test_a_byte_order", "test_bounded_readers.py::test_json_integers", "test_bounded_readers.py::test_a_suite_path",
      "test_bounded_readers.py::test_a_numeric", "test_bounded_readers.py::test_a_scorer_module", "test_bounded_readers.py::test_a_catastrophically", "test_bounded_readers.py::test_a_gguf")),
    ("stale inputs: `flips` on cells of an edited suite file; `tokens` on a probe set whose reference weights "
     "changed; a later checkpoint without tokenizer files named; `vectors`' zero update noted",
     ("test_inputs_fingerprinted.py::test_flips_refuses", "test_inputs_fingerprinted.py::test_tokens_refuses", "test_inputs_fingerprinted.py::test_tokens_names", "test_inputs_fingerprinted.py::test_vectors_notes")),
    ("file modes kept on rewrite (results.h5, aclarena.toml); export's HTML report not 0600",
     ("test_file_modes_kept.py::test_rewrites_keep", "test_file_modes_kept.py::test_export_html")),
    ("conventions: arXiv 2510.17776's estimator under its own name beside aclarena's", "test_forgetting_conventions.py::test_forgetting_reports"),
)


def print_groups(title: str, groups: tuple, res: dict[str, str], tally: Counter[str]) -> None:
    """A table of classes, each the tests whose ids start with one of its prefixes: passed / found."""
    print(f"| {title} | tests | result |")
    print("|---|---|---|")
    for label, prefixes in groups:
        prefixes = (prefixes,) if isinstance(prefixes, str) else prefixes
        got = [v for k, v in res.items() if k.startswith(tuple(p.replace(".py::", "::") for p in prefixes))]
        n_ok = sum(v == "passed" for v in got)
        tally.update(got)
        mark_all = "✓" if got and n_ok == len(got) else ("?" if not got else "✗")
        print(f"| {label} | {', '.join(f'`{p}`' for p in prefixes)} | {mark_all} {n_ok}/{len(got)} |")
    print()


def error_lines(xml: str) -> dict[str, str]:
    """The one-line error each case printed (recorded with ``record_property("error", ...)``)."""
    out = {}
    for case in ET.parse(xml).getroot().iter("testcase"):
        for prop in case.iter("property"):
            if prop.get("name") == "error":
                out[f"{Path(case.get('classname', '').replace('.', '/')).name}::{case.get('name')}"] = prop.get("value")
    return out


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
    print_groups("class of bad input or defect (issue 15)", ISSUE15, res, tally)
    print_groups("class of fault (issue 33)", ISSUE33, res, tally)
    print_groups("class of defect (issue 43)", ISSUE43, res, tally)
    lines = error_lines(xml)
    print("| `flips`: bad input (issue) | the one line it printed | result |")
    print("|---|---|---|")
    for c in FLIPS_CASES:
        name = f"test_flips_bad_input[{c.label}]"
        st = get("test_flips_bad_input", c.label)
        tally[st or "missing"] += 1
        line = next((v for k, v in lines.items() if k.endswith(name)), "")
        line = line.removeprefix("aclarena-diag flips: error: ").replace("|", "\\|")
        print(f"| {c.label} ({c.issue}) | {line} | {mark.get(st, '?')} |")
    print()
    total = sum(tally.values())
    print(f"Bad-input cases tried: {total}; passed: {tally['passed']}; failed: {tally['failed']}; "
          f"skipped: {tally['skipped']}.")
    suite = Counter(res.values())
    print(f"Whole reliability suite (tests/reliability): {sum(suite.values())} tests; passed: {suite['passed']}; "
          f"failed: {suite['failed']}; skipped: {suite['skipped']}.")


if __name__ == "__main__":
    main(sys.argv[1])
