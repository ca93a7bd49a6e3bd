"""Cost of the drift monitor per training step: the same phase trained with and without it, alternating in one run.

    python benchmarks/monitor_overhead.py --run runs/quick --phases sft --max-steps 40 --reps 2 \
        --json docs/results/monitor_overhead.json                  # what docs/monitor.md reports
    python benchmarks/monitor_overhead.py --run runs/mini            # a finished mini run, the ecom stage
    python benchmarks/monitor_overhead.py                            # trains the tiny curriculum up to search first

What it does: copies the checkpoints the stage needs (its parent and the earlier stages'
ends) and the run's curriculum into a scratch run, then retrains every phase of ``--stage``
(default: ecom if the run has it, else its last stage) from its real parent with the same
recipe, data and seeds, alternately without and with the drift monitor that ``aclarena-diag
train`` attaches with a default ``[monitor]`` section (:func:`aclarena.train.monitor.monitor_factory`
with :class:`~aclarena.train.monitor_spec.MonitorSpec` defaults: every 10 steps, 8-prompt probe sets
of 64 new tokens per earlier domain plus the stage's own RL's Razor probe, the earlier stages'
checkpoints as references, the stage parent as the stage start), ``--reps`` times each, the
order alternating (off/on, then on/off, ...) so that a drift of the machine's load hits both
kinds alike. The probe sets are generated once before the timed runs (the curriculum runner
also makes them once per run, then reads them from results.h5); their cost is printed apart.

Printed per phase: wall time and CPU time of the training call (model loading excluded,
the monitor's set-up, first and last checks included), the monitor's set-up and check times,
the ratios with / without, and the overhead per training step. CPU time (this process, all
threads) is the better measure on a shared machine: other processes stretch wall time but not
it. Nothing is asserted; ``--json`` keeps every timed run and the command.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def tiny_run(where: Path) -> Path:
    """Train examples/tiny.toml up to its search stage (about a minute on 2 cores)."""
    from aclarena.train.config import load_config
    from aclarena.train.curriculum import run_curriculum

    cfg = load_config(ROOT / "examples" / "tiny.toml")
    out = where / "tiny-run"
    run_curriculum(cfg, out, show_progress=False)
    return out


def scratch_run(src: Path, dst: Path, stage: str) -> tuple[object, list[str], list[tuple[str, str]]]:
    """A copy of what retraining ``stage`` needs; returns (config, phase names, [(domain, earlier end)])."""
    from aclarena.train.config import load_config
    from aclarena.train.curriculum import CHECKPOINTS, CONFIG_COPY
    from aclarena.train.naming import phase_names
    from aclarena.train.plan import plan

    cfg = load_config(src / CONFIG_COPY)
    domains = [s.domain for s in cfg.stages]
    if stage not in domains or domains.index(stage) == 0:
        raise SystemExit(f"--stage {stage!r} must be a later stage of the run's curriculum ({', '.join(domains)})")
    i = domains.index(stage)
    jobs = {j.name: j for j in plan(cfg, 1)}
    names = phase_names("seq", cfg.stages[i])
    earlier = [(s.domain, phase_names("seq", s)[-1]) for s in cfg.stages[:i]]
    need = {jobs[names[0]].parent, *[c for _, c in earlier]}
    dst.mkdir(parents=True)
    shutil.copy2(src / CONFIG_COPY, dst / CONFIG_COPY)
    for n in need:
        shutil.copytree(src / CHECKPOINTS / n, dst / CHECKPOINTS / n)
    return cfg, names, earlier


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--run", type=Path, help="a finished run trained by `aclarena-diag train` (default: a tiny one)")
    ap.add_argument("--stage", default=None, help="the stage to retrain (default: ecom if present, else the last)")
    ap.add_argument("--reps", type=int, default=2, help="timed runs of each kind (alternating order), default 2")
    ap.add_argument("--phases", default=None, help="only these phase kinds of the stage, e.g. 'sft' (default: all)")
    ap.add_argument("--max-steps", type=int, default=None, help="cap each phase at N steps (default: the recipe's)")
    ap.add_argument("--json", type=Path, help="also write the numbers here")
    args = ap.parse_args(argv)

    import torch

    from aclarena.train.curriculum import CHECKPOINTS, read_template, run_job
    from aclarena.train.monitor import monitor_factory
    from aclarena.train.monitor_spec import MonitorSpec
    from aclarena.train.phases import quiet
    from aclarena.train.plan import plan

    quiet()
    import subprocess

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()  # the code that runs (read before it runs)
    tmp = Path(tempfile.mkdtemp(prefix="aclarena-monbench-"))
    try:
        src = args.run if args.run is not None else tiny_run(tmp)
        from aclarena.train.config import load_config
        from aclarena.train.curriculum import CONFIG_COPY

        domains = [s.domain for s in load_config(src / CONFIG_COPY).stages]
        stage = args.stage or ("ecom" if "ecom" in domains[1:] else domains[-1])
        run = tmp / "run"
        cfg, names, _ = scratch_run(src, run, stage)
        spec = MonitorSpec()  # the default [monitor] settings
        jobs = {j.name: j for j in plan(cfg, 1)}
        if args.max_steps is not None:
            jobs = {k: dataclasses.replace(j, spec=dataclasses.replace(j.spec, trl={**j.spec.trl,
                                                                                    "max_steps": args.max_steps}))
                    if j.spec is not None else j for k, j in jobs.items()}
        if args.phases is not None:
            names = [n for n in names if jobs[n].phase in args.phases.split(",")]
        template = read_template(cfg)

        mcfg = dataclasses.replace(cfg, monitor=spec)
        factory = monitor_factory(mcfg, run, list(jobs.values()), lambda n: str(run / CHECKPOINTS / n))
        t0 = time.perf_counter()
        probes = factory(jobs[names[0]])[0].probes  # generates the probe sets once (stored in results.h5)
        probe_s = time.perf_counter() - t0
        tokens = sum(int(m.sum()) for p in probes for m in p.scored)

        def one(name: str, monitored: bool, rep: int) -> dict:
            job = jobs[name]
            folders = {p.name: str(p) for p in (run / CHECKPOINTS).iterdir()} | done
            cbs = factory(job) if monitored else []  # read back from results.h5, as a run's later phases do
            out = tmp / f"{name}-{'on' if monitored else 'off'}-{rep}"
            torch.manual_seed(0)
            w0, c0 = time.perf_counter(), time.process_time()
            res = run_job(cfg, job, run, folders, cbs, template if job.parent == "base" else None, folder=out,
                           work=tmp / f"{out.name}.work")
            wall, cpu = time.perf_counter() - w0, time.process_time() - c0
            row = {"phase": name, "monitor": monitored, "rep": rep, "steps": res.steps, "train_s": res.time_s,
                   "wall_s": wall, "cpu_s": cpu}
            if monitored:
                m = cbs[0]
                row.update(setup_s=m.setup_seconds, checks=len(m.check_seconds), checks_s=sum(m.check_seconds))
            return row

        rows: list[dict] = []
        done: dict[str, str] = {}
        for name in names:
            for rep in range(args.reps):
                for monitored in ((False, True) if rep % 2 == 0 else (True, False)):
                    r = one(name, monitored, rep)
                    rows.append(r)
                    print(json.dumps(r), flush=True)
            # the next phase starts from this phase's result (the unmonitored copy: the same recipe)
            done[name] = str(tmp / f"{name}-off-0")

        print(f"\nstage {stage!r} of {src} ({torch.get_num_threads()} torch threads, load average "
              f"{os.getloadavg()[0]:.1f}); probe sets: {len(probes)} x {spec.probe_n} prompts, "
              f"{spec.probe_max_new_tokens} new tokens, generated once in {probe_s:.1f} s"
              f" ({tokens} scored tokens); monitor every {spec.every_n_steps} steps")
        print(f"{'phase':<16}{'steps':>6}{'wall off':>10}{'wall on':>10}{'ratio':>8}{'cpu off':>10}{'cpu on':>10}"
              f"{'ratio':>8}{'range':>14}{'cpu/step':>10}{'setup':>8}{'checks':>8}{'per check':>10}")
        tot = {"off_w": 0.0, "on_w": 0.0, "off_c": 0.0, "on_c": 0.0, "steps": 0}
        phases = []
        for name in names:
            off = [r for r in rows if r["phase"] == name and not r["monitor"]]
            on = [r for r in rows if r["phase"] == name and r["monitor"]]
            ow, nw = statistics.median(r["train_s"] for r in off), statistics.median(r["train_s"] for r in on)
            oc, nc = statistics.median(r["cpu_s"] for r in off), statistics.median(r["cpu_s"] for r in on)
            # each repetition's pair (run next to each other): the spread of the ratio
            pairs = [b["cpu_s"] / a["cpu_s"] for a, b in zip(off, on, strict=True)]
            setup = statistics.median(r["setup_s"] for r in on)
            checks = on[0]["checks"]
            per = statistics.median(r["checks_s"] / max(r["checks"], 1) for r in on)
            steps = off[0]["steps"]
            tot["off_w"] += ow
            tot["on_w"] += nw
            tot["off_c"] += oc
            tot["on_c"] += nc
            tot["steps"] += steps
            phases.append({"phase": name, "steps": steps, "wall_off_s": ow, "wall_on_s": nw, "ratio_wall": nw / ow,
                           "cpu_off_s": oc, "cpu_on_s": nc, "ratio_cpu": nc / oc, "ratio_cpu_pairs": pairs,
                           "cpu_s_per_step_off": oc / steps, "cpu_s_per_step_on": nc / steps, "setup_s": setup,
                           "checks": checks, "per_check_s": per})
            print(f"{name:<16}{steps:>6}{ow:>9.1f}s{nw:>9.1f}s{nw / ow:>8.3f}{oc:>9.1f}s{nc:>9.1f}s"
                  f"{nc / oc:>8.3f}{f'{min(pairs):.3f}-{max(pairs):.3f}':>14}{(nc - oc) / steps:>9.3f}s"
                  f"{setup:>7.1f}s{checks:>8}{per:>9.2f}s")
        print(f"{'stage total':<16}{tot['steps']:>6}{tot['off_w']:>9.1f}s{tot['on_w']:>9.1f}s"
              f"{tot['on_w'] / tot['off_w']:>8.3f}{tot['off_c']:>9.1f}s{tot['on_c']:>9.1f}s"
              f"{tot['on_c'] / tot['off_c']:>8.3f}")
        print("target: monitored / unmonitored training time <= 1.10 at the default settings (wall: training call; "
              "cpu: this process's CPU time over the whole phase, model loading included); cpu/step: the monitor's "
              "extra CPU seconds per training step")
        if args.json:
            import sys

            args.json.write_text(json.dumps({
                "command": "python benchmarks/monitor_overhead.py " + " ".join(sys.argv[1:] if argv is None else argv),
                "commit": commit, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                "machine": f"{os.cpu_count()} CPU cores, shared; load average at the end "
                           f"{', '.join(f'{x:.1f}' for x in os.getloadavg())}",
                "torch_threads": torch.get_num_threads(), "stage": stage, "run": str(src),
                "monitor": {"every_n_steps": spec.every_n_steps, "probe_n": spec.probe_n,
                            "probe_max_new_tokens": spec.probe_max_new_tokens, "batch_size": spec.batch_size,
                            "probes": [p.name for p in probes], "scored_tokens": tokens},
                "probe_s": probe_s, "reps": args.reps, "phases": phases, "rows": rows,
                "ratio_wall": tot["on_w"] / tot["off_w"], "ratio_cpu": tot["on_c"] / tot["off_c"]}, indent=1) + "\n")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
