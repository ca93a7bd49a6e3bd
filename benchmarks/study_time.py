"""Benchmark: the 3-seed study, old recipe against new, side by side from scratch (issue 42, item 3).

    python benchmarks/study_time.py --root /work/runs/study-time --json-out docs/results/study_timing.json
    python benchmarks/study_time.py --root /tmp/st --old examples/tiny.toml --new examples/tiny.toml \\
        --seeds 2 -n 4 --lead-n 6          # toy size, a few minutes

Two ``aclarena-diag study`` processes, one per recipe, start together into fresh run folders under ``--root``
(``old/``, ``new/``), each held to ``--threads`` torch threads (default 1: one core each on the 2-core
machine), so both see the same machine and the same load. A recipe is a commit of aclarena (``--old-src``,
``--new-src``: the study's code as it was, checked out as a git worktree under ROOT, ``old-src/``, ``new-src/``;
give a commit id, not a branch, for a benchmark you will resume)
and a curriculum config of that checkout (``--old``, ``--new``), so what the new study does less of counts
as well as what its curriculum trains less of. The study options (seeds, ``-n``, ``--lead-n``,
``--lead-stage``) are the same for both, by default those of the committed findings
(``docs/results/findings.json``). Each study's log is ``ROOT/<recipe>-<segment>.log``.

**Interrupted runs resume.** A benchmark stopped part-way (a session's end, Ctrl-C, a crash) is continued by
the same command: each study reads back what it finished (phases, evaluation cells, analyses) and the
ledger (``ROOT/ledger.json``) adds this invocation's wall time to the earlier ones. The ledger is rewritten
every ``HEARTBEAT_S`` seconds, so a kill loses at most that much of the wall time (a killed segment's finished
parts are read from its log); the steps a kill cuts short
(since the last checkpoint) are redone, by both studies alike. A root started with other settings or other
configs is refused in one line.

Reported per recipe: its wall time (the sum of its segments), the time of each of the study's parts as it
printed them (``study: eval 44.8 s``; a part cut by a kill counts in the wall time only), its segments with
the load average at their start; and the ratio of the new recipe's wall time to the old one's, against the
issue's target of one half. When one recipe finishes first the other goes on alone on its own threads (it
then competes less for memory bandwidth: the ratio errs in the old recipe's favour). A study that fails
(exit status not 0) is reported with its log and the benchmark exits 1. With ``--seeds 1`` the study runs no
validation (it needs two seeds), so neither side's time includes it: the benchmark prints that and writes it
with the result (``caveats``).

**Seed by seed.** The old 3-seed study takes about four hours on one thread, longer than a session on a machine
that keeps nothing between sessions; ``--seeds 1 --first-seed K`` times seed K alone (each config copied with
``[run] seed = K``: the K-th seed of the 3-seed study, the same models), ``benchmarks/validation_time.py`` that
seed's validation, and ``benchmarks/study_by_seed.py`` adds the seeds up.

``--status`` prints what the ledger holds (while the benchmark runs, or after a session stopped it) and starts
nothing. Once one study has finished, the wall times so far bound the ratio: the other study can only take longer,
so with the new study done, new / (the old one's time so far) is an upper bound on the ratio.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
LEDGER = "ledger.json"
HEARTBEAT_S = 15.0
TARGET_RATIO = 0.5
#: the study as it ran on 2026-12-05, before issue 42's study changes: the old side's code by default
OLD_SRC = "ce82b7117cb133555da92f75bc90c7ec5ba70775"
PART_LINE = re.compile(r"^\s*study: (?P<part>\S(?:.*\S)?) (?P<s>\d+(?:\.\d+)?) s$")


def load() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def parts_of(log: Path) -> dict[str, float]:
    """The study's finished parts in one log, ``{part: seconds}`` (a part named twice: the sum)."""
    out: dict[str, float] = {}
    if not log.exists():
        return out
    for line in log.read_text(encoding="utf-8", errors="replace").splitlines():
        m = PART_LINE.match(line)
        if m:
            out[m["part"]] = out.get(m["part"], 0.0) + float(m["s"])
    return out


class Ledger:
    """``ROOT/ledger.json``: the settings the root was started with and every segment of every job."""

    def __init__(self, root: Path, settings: Mapping[str, Any]) -> None:
        self.path = root / LEDGER
        if self.path.exists():
            data = json.loads(self.path.read_text(encoding="utf-8"))
            if data.get("settings") != dict(settings):
                changed = sorted(k for k in set(data.get("settings", {})) | set(settings)
                                 if data.get("settings", {}).get(k) != settings.get(k))
                raise SystemExit(f"error: {root} holds a benchmark started with other settings ({', '.join(changed)}); "
                                 f"give another --root or the same options")
            self.data = data
            for label, job in self.data["jobs"].items():  # a segment still open was cut short by a kill
                for seg in job["segments"]:
                    if seg.get("status") == "running":
                        if _alive(seg.get("pid")):
                            raise SystemExit(f"error: the {label} study of an earlier invocation is still running "
                                             f"(pid {seg['pid']}); stop it or let it finish, then rerun")
                        seg.update(status="killed", parts_s=parts_of(root / seg["log"]))
        else:
            self.data = {"settings": dict(settings), "jobs": {}}

    def job(self, label: str) -> dict[str, Any]:
        return self.data["jobs"].setdefault(label, {"segments": [], "done": False})

    def save(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.data, indent=1) + "\n", encoding="utf-8")
        os.replace(tmp, self.path)


def _die_with_parent() -> None:
    """In the child before exec (Linux): SIGTERM when the benchmark dies, even by SIGKILL, so that no study
    outlives it and a rerun never writes into a run folder a study is still writing."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _alive(pid: int | None) -> bool:
    """Whether process ``pid`` runs (a zombie left unreaped by the container's init does not)."""
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def side_by_side(commands: Mapping[str, Sequence[str]], root: Path, settings: Mapping[str, Any], *,
                 env: Mapping[str, str] | None = None, heartbeat_s: float = HEARTBEAT_S,
                 cwd: Mapping[str, Path] | None = None) -> dict[str, Any]:
    """Run every job's command at once (one segment each; jobs the ledger marks done are not rerun), record the
    segments in the ledger, return the ledger's data. ``done``: exit status 0. ``cwd``: a job's working directory."""
    root.mkdir(parents=True, exist_ok=True)
    ledger = Ledger(root, settings)
    procs: dict[str, tuple[subprocess.Popen[bytes], dict[str, Any], Path, float]] = {}
    for label, cmd in commands.items():
        job = ledger.job(label)
        if job["done"]:
            continue
        k = len(job["segments"])
        log = root / f"{label}-{k}.log"
        seg: dict[str, Any] = {"segment": k, "log": log.name, "started": time.strftime("%Y-%m-%dT%H:%M:%S"),
                               "load_at_start": load(), "wall_s": 0.0, "rc": None, "status": "running"}
        job["segments"].append(seg)
        with log.open("wb") as fh:
            where = (cwd or {}).get(label)
            path = {"PYTHONPATH": str(where)} if where is not None else {}  # the checkout's aclarena, in subprocesses too
            p = subprocess.Popen(list(cmd), stdout=fh, stderr=subprocess.STDOUT,
                                 env={**os.environ, **(env or {}), **path}, start_new_session=True,
                                 preexec_fn=_die_with_parent, cwd=where)
        seg["pid"] = p.pid
        procs[label] = (p, seg, log, time.monotonic())
    ledger.save()

    def stop(signum: int, frame: Any) -> None:  # the studies stop with the benchmark; the ledger keeps their time
        for p, *_ in procs.values():
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        beat()
        raise SystemExit(f"stopped (signal {signum}); rerun the same command to resume")

    def beat() -> None:  # the wall time so far; a killed segment's parts are read from its log on the rerun
        for _p, seg, _log, t0 in procs.values():
            if seg["status"] == "running":
                seg["wall_s"] = time.monotonic() - t0
        ledger.save()

    old = {s: signal.signal(s, stop) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
    try:
        last = time.monotonic()
        while any(seg["status"] == "running" for _, seg, _, _ in procs.values()):
            time.sleep(0.2)
            for label, (p, seg, log, t0) in procs.items():
                rc = p.poll()
                if seg["status"] == "running" and rc is not None:
                    seg.update(wall_s=time.monotonic() - t0, rc=rc, status="finished" if rc == 0 else "failed",
                               parts_s=parts_of(log), load_at_end=load())
                    ledger.job(label)["done"] = rc == 0
                    ledger.save()
            if time.monotonic() - last >= heartbeat_s:
                beat()
                last = time.monotonic()
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    ledger.save()
    return ledger.data


def summary(data: Mapping[str, Any]) -> dict[str, Any]:
    """Per job: wall time over segments, parts summed over segments; the ratio new/old when both are done."""
    jobs: dict[str, Any] = {}
    for label, job in data["jobs"].items():
        parts: dict[str, float] = {}
        for seg in job["segments"]:
            for k, v in seg.get("parts_s", {}).items():
                parts[k] = parts.get(k, 0.0) + v
        jobs[label] = {"done": job["done"], "wall_s": sum(s["wall_s"] for s in job["segments"]),
                       "segments": job["segments"], "parts_s": parts}
    out: dict[str, Any] = {"jobs": jobs, "target_ratio": TARGET_RATIO}
    if not all(label in jobs for label in ("old", "new")):
        return out
    old, new = jobs["old"], jobs["new"]
    if old["done"] and new["done"]:
        out["ratio_new_old"] = new["wall_s"] / old["wall_s"]
    elif new["done"] and old["wall_s"] > 0:  # the old study can only take longer than it has so far
        out["ratio_new_old_at_most"] = new["wall_s"] / old["wall_s"]
    elif old["done"] and new["wall_s"] > 0:
        out["ratio_new_old_at_least"] = new["wall_s"] / old["wall_s"]
    return out


def print_summary(s: Mapping[str, Any]) -> None:
    """Each study's state, wall time and parts; what the wall times say of the ratio so far."""
    for label, job in s["jobs"].items():
        state = "done" if job["done"] else "NOT DONE"
        print(f"{label}: {state}, {job['wall_s']:.0f} s over {len(job['segments'])} segment(s); "
              + ", ".join(f"{k} {v:.0f} s" for k, v in job["parts_s"].items()))
    if "ratio_new_old_at_most" in s:
        print(f"new / old wall time: at most {s['ratio_new_old_at_most']:.2f} so far (the old study has not finished; "
              f"target at most {TARGET_RATIO})")
    elif "ratio_new_old_at_least" in s:
        print(f"new / old wall time: at least {s['ratio_new_old_at_least']:.2f} so far (the new study has not "
              f"finished; target at most {TARGET_RATIO})")


def caveats(seeds: int) -> list[str]:
    """What the comparison leaves out with these settings, one line each (printed and written with the result)."""
    if seeds < 2:
        return [f"{seeds} seed: the study runs no validation (it fits on seed 0 and reports on the others), so neither "
                "side's time includes it; give --seeds 2 or more to time it"]
    return []


def checkout(ref: str, where: Path) -> str:
    """A worktree of the repository at ``ref`` in ``where`` (made once; a rerun checks it is the same commit)."""
    sha = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--verify", f"{ref}^{{commit}}"], capture_output=True,
                         text=True)
    if sha.returncode:
        raise SystemExit(f"error: {ref}: not a commit of {REPO}; give a commit, branch or tag")
    commit = sha.stdout.strip()
    if where.exists():
        head = subprocess.run(["git", "-C", str(where), "rev-parse", "HEAD"], capture_output=True, text=True)
        if head.stdout.strip() != commit:
            raise SystemExit(f"error: {where} is not a checkout of {ref} ({commit[:12]}); give another --root")
    else:
        subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", str(where), commit], check=True,
                       capture_output=True)
    return commit


def seeded(src: Path, rel: str, seed: int) -> str:
    """A copy of checkout ``src``'s config ``rel`` whose ``[run] seed`` is ``seed``, written beside it (so that what
    the config names relative to itself resolves as before); returns its path relative to ``src``."""
    text = (src / rel).read_text(encoding="utf-8")
    new, n = re.subn(r"(?m)^(\[run\][^\[]*?^seed\s*=\s*)\d+", rf"\g<1>{seed}", text)
    if n != 1:
        raise SystemExit(f"error: {src / rel}: no `seed = N` line in its [run] table to set --first-seed in")
    out = Path(rel).with_name(f"{Path(rel).stem}.seed{seed}.toml")
    (src / out).write_text(new, encoding="utf-8")
    return str(out)


def study_command(config: Path, run: Path, args: argparse.Namespace) -> list[str]:
    """``python -m aclarena study`` (run in a checkout: its working directory comes first on sys.path)."""
    cmd = [sys.executable, "-m", "aclarena", "study", "--run", str(run), "--config", str(config),
           "--seeds", str(args.seeds), "-n", str(args.n), "--lead-n", str(args.lead_n)]
    return cmd + (["--lead-stage", args.lead_stage] if args.lead_stage else [])


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", required=True, help="benchmark folder (old/, new/, logs, ledger.json); rerun to resume")
    ap.add_argument("--old-src", default=OLD_SRC, help=f"the old study's commit (default {OLD_SRC[:7]}: as on 2026-12-05)")
    ap.add_argument("--new-src", default="HEAD", help="the new study's commit (default HEAD)")
    ap.add_argument("--old", default="examples/mini.toml",
                    help="the old recipe's curriculum, in its checkout (default: the mini preset, the study's recipe)")
    ap.add_argument("--new", default="examples/mini-half.toml",
                    help="the new recipe's curriculum, in its checkout (default: the committed findings' recipe)")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--first-seed", type=int, default=None, metavar="K",
                    help="train seeds K..K+SEEDS-1 instead of the configs' own (a copy of each config with [run] "
                         "seed = K, written beside it in its checkout): a study's seeds timed in parts")
    ap.add_argument("-n", type=int, default=100, help="eval tasks per suite (default 100, as the committed findings)")
    ap.add_argument("--lead-n", type=int, default=100, help="validation items per earlier domain (default 100)")
    ap.add_argument("--lead-stage", default="ecom", help="the stage the validation watches (default ecom)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads per study (default 1: a core each)")
    ap.add_argument("--json-out", help="write the comparison here once both studies are done")
    ap.add_argument("--status", action="store_true",
                    help="print what ROOT's ledger holds (each study's wall time and parts so far, what they say of "
                         "the ratio) and exit; starts nothing, safe while the benchmark runs")
    args = ap.parse_args(argv)

    root = Path(args.root).resolve()
    if args.status:
        if not (root / LEDGER).is_file():
            print(f"error: {root / LEDGER}: no such ledger; give the --root of a benchmark that was started",
                  file=sys.stderr)
            return 1
        data = json.loads((root / LEDGER).read_text(encoding="utf-8"))
        for job in data["jobs"].values():  # a segment still running (or killed) has its finished parts in its log
            for seg in job["segments"]:
                if "parts_s" not in seg:
                    seg["parts_s"] = parts_of(root / seg["log"])
        print_summary(summary(data))
        return 0
    root.mkdir(parents=True, exist_ok=True)
    srcs = {"old": args.old_src, "new": args.new_src}
    commits = {label: checkout(ref, root / f"{label}-src") for label, ref in srcs.items()}
    configs = {"old": args.old, "new": args.new}
    for label, rel in configs.items():
        if not (root / f"{label}-src" / rel).is_file():
            print(f"error: --{label} {rel}: no such curriculum config at {srcs[label]} ({commits[label][:12]})",
                  file=sys.stderr)
            return 1
    if args.first_seed is not None:
        configs = {label: seeded(root / f"{label}-src", rel, args.first_seed) for label, rel in configs.items()}
    settings = {"seeds": args.seeds, "n": args.n, "lead_n": args.lead_n, "lead_stage": args.lead_stage,
                "threads": args.threads, **{f"{k}_commit": c for k, c in commits.items()},
                **{f"{k}_config": rel for k, rel in configs.items()},
                **{f"{k}_sha256": sha256(root / f"{k}-src" / rel) for k, rel in configs.items()}}
    commands = {label: study_command(Path(rel), root / label, args) for label, rel in configs.items()}
    threads = str(args.threads)
    for line in caveats(args.seeds):
        print(f"note: {line}", flush=True)
    print(f"load before: {load()}", flush=True)
    data = side_by_side(commands, root, settings, env={"OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads},
                        cwd={label: root / f"{label}-src" for label in commands})
    print(f"load after: {load()}", flush=True)
    s = summary(data)
    print_summary(s)
    failed = [(label, job["segments"][-1]["log"]) for label, job in s["jobs"].items() if not job["done"]]
    if failed:
        for label, log in failed:
            print(f"error: the {label} study did not finish: see {root / log}", file=sys.stderr)
        return 1
    ratio = s["ratio_new_old"]
    print(f"new / old wall time: {ratio:.2f} (target at most {TARGET_RATIO})")
    if args.json_out:
        import torch

        from aclarena.reproducibility import made_by

        torch.set_num_threads(args.threads)  # made_by's machine line then names the studies' threads, not the driver's

        cmd = "python benchmarks/study_time.py " + " ".join(argv if argv is not None else sys.argv[1:])
        report = {"made_by": made_by(cmd), "settings": settings, **s, "caveats": caveats(args.seeds),
                  "commands": {k: " ".join(v[2:]).replace(str(root), "ROOT") for k, v in commands.items()}}
        Path(args.json_out).write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
        print(f"wrote {args.json_out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
