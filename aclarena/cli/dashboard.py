"""``aclarena-diag dashboard``: the Dash drift explorer, on 127.0.0.1 by default."""

from __future__ import annotations

import argparse
import sys


def register(sub: argparse._SubParsersAction) -> None:
    from aclarena.cli._common import add_verb

    p = add_verb(
        sub,
        "dashboard",
        help="serve the interactive drift explorer (Dash) for a run",
        examples=(
            "aclarena-diag dashboard --run runs/demo",
            "aclarena-diag dashboard --run runs/demo --port 8060",
        ),
        json_option=False,
    )
    p.add_argument("--host", default="127.0.0.1",
                   help="interface to bind (default 127.0.0.1: this machine only; 0.0.0.0 exposes the run to the network)")
    p.add_argument("--port", type=int, default=8050, help="port (default 8050)")
    p.add_argument("--dev", action="store_true", help="Dash debug mode (reloader, in-browser tracebacks): never on a shared host")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from aclarena.analysis.items import describe_items
    from aclarena.analysis.prompt import score_prompt
    from aclarena.dashboard.app import serve

    if args.host not in ("127.0.0.1", "localhost", "::1"):
        print(f"warning: binding {args.host}: anyone who can reach this machine can read the run", file=sys.stderr)
    print(f"aclarena dashboard for {args.run} on http://{args.host}:{args.port}/ (Ctrl-C stops it)", file=sys.stderr)
    serve(args.run, host=args.host, port=args.port, debug=args.dev, score_prompt=score_prompt,
          describe_items=describe_items)
    return 0
