"""One process of the FSDP2 drift-monitor test (tests/integration/test_monitor_sharded.py), started by torchrun.

    python -m torch.distributed.run --nproc_per_node 2 tests/sharded_monitor_worker.py OUT

1. A probe set made with another tokenizer is refused on every process before training
   (the one-line error of each rank is written to ``OUT/bad-<rank>.txt``).
2. A tiny Qwen3 model trains 5 steps under FSDP2 (``fully_shard`` through accelerate, gloo on
   CPU) with a drift monitor every 2 steps whose reference is a checkpoint folder (sharded in
   turn when loaded) and whose stage start is the model at the start. At every step a second
   callback gathers the whole weights (on every rank, as FSDP needs).
3. After the process group is gone, rank 0 scores the gathered weights of each check in one
   process with a fresh monitor and writes both series to ``OUT/result.json``.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from fixtures import make_tokenizer, perturb  # noqa: E402
from monitor_helpers import fsdp_trainer, make_probe  # noqa: E402
from transformers import TrainerCallback  # noqa: E402

import aclarena.train.callbacks as cb  # noqa: E402
from aclarena.errors import AclarenaError  # noqa: E402
from aclarena.models.tiny import build_model, save_checkpoint, tiny_config, train_tokenizer  # noqa: E402

STEPS, EVERY, BATCH = 5, 2, 2  # 6 probe sequences in batches of 2: 3 batches, so rank 1 pads with one pass


class Weights(TrainerCallback):
    """The whole weights at the start and after every step (each rank takes part in the gather)."""

    def __init__(self) -> None:
        self.at: dict[int, dict[str, torch.Tensor]] = {}
        self.param_types: set[str] = set()

    def _take(self, step: int, model) -> None:
        full = {}
        for name, p in model.named_parameters():
            t = p.detach()
            full[name] = (t.full_tensor() if type(t).__name__ == "DTensor" else t).clone()
        if dist.get_rank() == 0:
            self.at[step] = full

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        self.param_types = {type(p).__name__ for p in model.parameters()}
        self.plain = [n for n, p in model.named_parameters() if type(p).__name__ != "DTensor"]
        self._take(0, model)

    def on_step_end(self, args, state, control, model=None, **kwargs):
        self._take(int(state.global_step), model)


def main(out: Path) -> None:
    rank = int(os.environ["RANK"])
    tok = make_tokenizer()
    ref_model = perturb(build_model(tiny_config(tok), seed=0), 0.05, seed=3)
    ref_folder = save_checkpoint(ref_model, tok, out / f"ref-{rank}")  # one folder per process: no race
    probe = make_probe(ref_model, tok, folder=ref_folder)

    # 1. bad input: a probe set of another tokenizer (and vocabulary), refused before any step
    other = train_tokenizer([f"entirely different words number {i} alpha beta" for i in range(200)], vocab_size=300)
    other_model = build_model(tiny_config(other), seed=1)
    bad_probe = make_probe(other_model, other, folder=save_checkpoint(other_model, other, out / f"other-{rank}"))
    bad = cb.DriftMonitorCallback([bad_probe], run_dir=out / "bad-run", label="bad", every_n_steps=EVERY)
    trainer = fsdp_trainer(build_model(tiny_config(tok), seed=0), tok, out / "bad-trainer", steps=STEPS, lr=3e-2,
                           callbacks=[bad], ddp_timeout=120)
    try:
        trainer.train()
        said = "trained"
    except AclarenaError as e:
        said = str(e)
    (out / f"bad-{rank}.txt").write_text(f"{trainer.state.global_step}\n{said}")

    # 2. training under FSDP2 with the monitor
    sharded_refs = []
    shard_like = cb.shard_like
    cb.shard_like = lambda model, like: (sharded_refs.append(type(model).__name__), shard_like(model, like))[1]
    model = build_model(tiny_config(tok), seed=0)
    weights = Weights()
    monitor = cb.DriftMonitorCallback([probe], run_dir=out / "run", label="fsdp", every_n_steps=EVERY,
                                      references={"math": ref_folder}, batch_size=BATCH)
    trainer = fsdp_trainer(model, tok, out / "trainer", steps=STEPS, lr=3e-2, callbacks=[monitor, weights],
                           ddp_timeout=120)
    monitor.bind(trainer)
    trainer.train()
    info = {"rank": rank, "sharded": monitor._sharded, "checks": len(monitor.check_seconds),
            "param_types": sorted(weights.param_types), "plain": weights.plain, "sharded_references": sharded_refs,
            "history": monitor.history}
    (out / f"rank{rank}.json").write_text(json.dumps(info))
    trainer.accelerator.wait_for_everyone()
    dist.barrier()
    dist.destroy_process_group()  # leave together: no rank tears gloo down while another still uses it
    if rank != 0:
        _leave()

    # 3. one process, same weights: a fresh monitor set up on the start weights, then each check's weights
    plain = build_model(tiny_config(tok), seed=0)
    solo = cb.DriftMonitorCallback([probe], references={"math": ref_folder}, every_n_steps=EVERY, batch_size=BATCH)

    class State:
        is_world_process_zero = True
        global_step = 0
        max_steps = STEPS
        log_history: list = []

    class Control:
        should_log = should_save = should_training_stop = False

    plain.load_state_dict(weights.at[0], strict=False)
    solo.on_train_begin(trainer.args, State(), Control(), model=plain, processing_class=tok)
    steps = [row["step"] for row in monitor.history]
    one = []
    for step in steps:
        missing, _ = plain.load_state_dict(weights.at[step], strict=False)
        assert set(missing) <= {"lm_head.weight"}, missing  # tied to the embedding
        one.append({"step": step, **{f"monitor/{p}/{m}": v for p, vals in solo.measure(plain).items()
                                     for m, v in vals.items()}})
    (out / "result.json").write_text(json.dumps({"sharded": monitor.history, "one_process": one}))


def _leave() -> None:
    """Exit without interpreter finalization: gloo threads still referenced by the trainer were seen to abort
    there ("terminate called without an active exception", pytorch #179291) after the work was done."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
    _leave()
