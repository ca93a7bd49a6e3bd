"""Write tests/data/archives/results/order-study-<version>/: a real ``order-study`` result and what it reads
back as.

Runs the real ``aclarena-diag study --orders 'math,search;math,if'`` on the tests' small curriculum
(tests/train_helpers.py ``small_config``: tiny models, one RL step, two items per suite; about 90 s on two
cores), keeps the ``orders/summary`` group as written (copied with its attributes into a store of its own,
so the archive stays small) and writes expected.json (the payload read back, as JSON). Run once per released
order-study result version; the folder is committed and never rewritten, and tests/unit/test_backcompat.py
keeps reading it. Usage (from the repository root): python tests/data/archives/results/make_order_study.py
"""

import json
import tempfile
from pathlib import Path

from archive_common import keep_groups, plain, setup


def main() -> None:
    setup()
    from train_helpers import small_config

    from aclarena.cli import main as cli
    from aclarena.results import orders
    from aclarena.store import ResultsStore

    out = Path(__file__).parent / f"{orders.RESULT_TYPE}-{orders.RESULT_VERSION}"
    with tempfile.TemporaryDirectory() as tmp:
        cfg = Path(tmp) / "small.toml"
        cfg.write_text(small_config(("math", "search", "if"), rl_steps=1))
        run = Path(tmp) / "orders"
        code = cli(["study", "--orders", "math,search;math,if", "--config", str(cfg), "--run", str(run),
                    "--seeds", "1", "-n", "2"])
        assert code == 0, code
        out.mkdir(exist_ok=True)
        keep_groups(run / "results.h5", out / "results.h5", orders.STORE_KEY)
    with ResultsStore(out).reader() as r:
        expected = {orders.STORE_KEY: plain(orders.read_orders(r))}
    (out / "expected.json").write_text(json.dumps(expected, indent=1, sort_keys=True) + "\n")
    print("wrote", out)


if __name__ == "__main__":
    main()
