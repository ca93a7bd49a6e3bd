"""``aclarena-diag flips``: where a forgotten item's path parted, and whether swapping those tokens brings it back."""

from __future__ import annotations

import argparse
from typing import Any

from aclarena.cli._common import (
    add_load_options,
    add_verb,
    fmt,
    load_options,
    print_json,
    print_table,
    progress,
    quiet_libraries,
)
from aclarena.errors import AclarenaError


def register(sub: argparse._SubParsersAction) -> None:
    p = add_verb(
        sub,
        "flips",
        help="locate the decision that flipped each forgotten item between two checkpoints, and test it by swapping tokens",
        description="From the capability matrix's per-item outcomes, the items --from solved and --to fails (and the "
        "reverse, as a control). Each is replayed greedily by both checkpoints; --from's trajectory is scored "
        "teacher-forced under --to: the first position where --to's top-1 differs, its entropy percentile, KL and "
        "both top-k, and the share of such divergences in the top-entropy positions against chance. The swap test "
        "lets --from's token through at the top b% positions by KL(E||L) while --to generates (and the reverse), "
        "against the same number of randomly chosen disagreeing positions. Results go to results.h5 "
        "(flips/<from>/<to>/<suite>); a rerun with the same settings reads them back.",
        examples=(
            "aclarena-diag flips --run runs/demo --from seq-math --to seq-ecom --suite math/id",
            "aclarena-diag flips --run runs/demo --from seq-search --to seq-ecom --suite search/id --budgets 1,5,20 --json",
            "aclarena-diag flips --run runs/mine --from seq-math --to seq-if --suite math/id --max-items 20 --no-reverse",
        ),
    )
    p.add_argument("--from", dest="early", required=True, metavar="E", help="the earlier checkpoint (solved the items)")
    p.add_argument("--to", dest="late", required=True, metavar="L", help="the later checkpoint (fails them)")
    p.add_argument("--suite", required=True, metavar="S",
                   help="a suite evaluated for both: an arena suite (e.g. math/id) or one of the manifest's [suites.NAME]")
    p.add_argument("--allow-code", action="store_true",
                   help="allow a custom suite's scorer that is a Python callable (package.module:function)")
    p.add_argument("--budgets", default="0.5,1,2,5,10,20", metavar="LIST",
                   help="swap budgets in percent of the trajectory's tokens (default 0.5,1,2,5,10,20)")
    p.add_argument("--top", type=float, default=0.06, metavar="Q",
                   help="share of highest-entropy positions that count as decision points (default 0.06)")
    p.add_argument("--logprob-below", type=float, default=-2.302585, metavar="LP",
                   help="report the first position where L's log-prob of E's token is below LP (default ln 0.1)")
    p.add_argument("--topk", type=int, default=5, metavar="K", help="alternatives shown at the divergence (default 5)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random control (default 0)")
    p.add_argument("--max-items", type=int, default=None, metavar="N", help="analyse at most N items per direction (the counts printed stay the "
                   "totals, with the number analysed)")
    p.add_argument("--no-swap", action="store_true", help="localize only (no swap test)")
    p.add_argument("--no-reverse", action="store_true", help="skip the reverse direction (E generating, L's tokens in)")
    p.add_argument("--batch-size", type=int, default=16, metavar="B", help="episodes generated together (default 16)")
    p.add_argument("--force", action="store_true", help="recompute even when a result with these settings is stored")
    add_load_options(p)
    p.set_defaults(func=run)


def _budgets(text: str) -> tuple[float, ...]:
    try:
        return tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise AclarenaError(f"--budgets must be comma-separated percentages such as 0.5,1,5,20; got {text!r}") from None


def _print_paired(args: argparse.Namespace) -> int:
    """An imported suite (lm-eval per-sample scores): the items lost and gained, paired by document, with
    the exact McNemar test of a drop; no replay (the harness's prompts and scoring are not here)."""
    from aclarena.analysis.paired import imported_flips

    out = imported_flips(args.run, args.early, args.late, args.suite)
    res = out
    if args.json:
        print_json(out)
        return 0
    print_table([out], ["suite", "n", "lost", "gained", "p_drop"],
                title=f"items of {args.suite} solved by {args.early} and failed by {args.late} (imported per-sample scores)",
                caption="not replayed: an imported suite has no prompts here; register the task as a JSONL suite "
                        "([suites.NAME]) to locate and swap-test its flips")
    print("lost: " + (", ".join(res["lost_items"][:20]) or "none") + (" ..." if len(res["lost_items"]) > 20 else ""))
    return 0


def run(args: argparse.Namespace) -> int:
    from aclarena.analysis.flips import FlipSettings, flips
    from aclarena.analysis.paired import imported_suite

    quiet_libraries()
    if imported_suite(args.run, args.early, args.suite) is not None:
        return _print_paired(args)
    settings = FlipSettings(budgets=_budgets(args.budgets), top=args.top, logprob_below=args.logprob_below,
                            topk=args.topk, seed=args.seed, max_items=args.max_items, swap=not args.no_swap,
                            reverse=not args.no_reverse, batch_size=args.batch_size)
    with progress(not args.json) as bar:
        tasks: dict[str, Any] = {}

        def report(phase: str, done: int, total: int) -> None:
            if phase not in tasks:
                tasks[phase] = bar.add_task(phase, total=total)
            bar.update(tasks[phase], completed=done)

        res = flips(args.run, args.early, args.late, args.suite, settings, load=load_options(args), force=args.force,
                    progress=report, allow_code=args.allow_code)
    if args.json:
        print_json(res.to_dict())
        return 0
    _print(res)
    return 0


def _share(c: dict[str, Any], j: int) -> str:
    s, lo, hi = c["share"][j], c["low"][j], c["high"][j]
    return f"{fmt(s, 2)} [{fmt(lo, 2)}, {fmt(hi, 2)}]"


def _print(res: Any) -> None:
    from aclarena.results.flips import counts_line

    print(f"{counts_line(res.counts())}; {res.relation}" + (" (stored result)" if res.cached else ""))
    rows = []
    for it in res.items:
        rows.append({"item": it.item_id, "dir": it.direction, "reproduced": it.reproduced,
                     "at": f"{it.diverge}/{it.n_positions}" if it.diverge >= 0 else "-",
                     "below": it.below if it.below >= 0 else "-",
                     "tokens": f"{it.e_token!r} -> {it.l_token!r}" if it.diverge >= 0 else "-",
                     "entropy": it.e_entropy, "pct": f"{it.entropy_pct:.0f}" if it.diverge >= 0 else "-",
                     "kl": it.kl, "top": it.in_top})
    print_table(rows, ["item", "dir", "reproduced", "at", "below", "tokens", "entropy", "pct", "kl", "top"],
                headers=["item", "flip", "reproduced", "diverges at", "log-prob below", "E token -> L top-1",
                         "E entropy", "percentile", "KL(E||L)", f"in top {res.settings['top']:g}"],
                title="where E's trajectory first departs under L (positions among E's generated tokens)",
                caption="reproduced: the greedy replays give the matrix's outcomes (only those are counted and swapped)")
    for d, c in res.chance.items():
        if c.n:
            print(f"{d}: {c.hits}/{c.n} divergences in E's top {res.settings['top']:g} entropy positions = "
                  f"{c.share:.2f} [{c.share_low:.2f}, {c.share_high:.2f}]; chance {c.chance:.2f} "
                  f"[{c.chance_low:.2f}, {c.chance_high:.2f}], p = {c.p_value:.3g}")
    if res.forward is not None:
        f = res.forward.curves()
        r = res.reverse.curves() if res.reverse is not None else None
        rows = []
        for j, b in enumerate(res.forward.budgets):
            row = {"budget": f"{b:g}%", "n": f["kl"]["n"][j], "kl": _share(f["kl"], j), "random": _share(f["random"], j)}
            if r is not None:
                row |= {"rkl": _share(r["kl"], j), "rrandom": _share(r["random"], j)}
            rows.append(row)
        cols = ["budget", "n", "kl", "random"] + (["rkl", "rrandom"] if r is not None else [])
        heads = ["budget", "items", "recovered: top KL", "recovered: random"] + \
            (["E broken: top KL", "E broken: random"] if r is not None else [])
        print_table(rows, cols, headers=heads, title="swap test (greedy; shares with 95% Wilson intervals)",
                    caption="recovered: L generating solves the item when E's tokens go through at that many "
                            "disagreeing positions; broken: E generating fails it with L's tokens")
        for curve in (res.forward, res.reverse):
            for note in curve.notes() if curve is not None else []:
                print(f"note: {note}")
    elif not any(i.reproduced and i.direction == "forgot" for i in res.items):
        print("swap test: no forgotten item was reproduced by the greedy replays, so there is nothing to swap")
    c = res.cost
    print(f"cost: {c.get('total_s', float('nan')):.1f} s in all, {c.get('per_item_s', float('nan')):.2f} s per item")
