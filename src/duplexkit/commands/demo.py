"""`duplexkit demo`: the whole job on the embedded default, offline.

Runs the built-in benchmark (`duplexkit bench --dataset builtin`) against the embedded server and the
built-in model at realtime pace, scores it with the offline builtin judge, writes the HTML report, and
prints the summary table, the scores and where everything is, then how to talk to the same model live in
the browser playground. Rerunning resumes the same run folder.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from duplexkit.commands.options import DEFAULT_MODEL, MODEL_CHOICES


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "demo",
        help="run the built-in benchmark on the embedded model, score it offline, write the report",
        description="The whole job offline: `duplexkit bench --dataset builtin --score --report` against the "
        "embedded server. Exit codes as for bench.",
    )
    parser.add_argument(
        "--out", type=Path, default=Path("demo-out"), help="run folder (default: ./demo-out; resumable)"
    )
    parser.add_argument(
        "--model", default=DEFAULT_MODEL, choices=MODEL_CHOICES, help="built-in model (default: %(default)s)"
    )
    parser.add_argument(
        "--pace",
        choices=["realtime", "as-fast-as-possible"],
        default="realtime",
        help="as-fast-as-possible is quicker but its clock is invalid (scored anyway, and labelled so)",
    )
    parser.add_argument("--limit", type=int, default=None, help="run only this many samples")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from duplexkit.commands import bench
    from duplexkit.server.playground import playground_url

    argv = ["bench", "--dataset", "builtin", "--out", str(args.out), "--model", args.model]
    argv += ["--concurrency", "6", "--pace", args.pace, "--score", "--report"]
    if args.pace != "realtime":
        argv.append("--allow-invalid-clock")
    if args.limit is not None:
        argv += ["--limit", str(args.limit)]
    print("duplexkit demo: duplexkit " + " ".join(argv))
    parser = argparse.ArgumentParser(prog="duplexkit")
    bench.register(parser.add_subparsers(dest="command", required=True))
    bench_args = parser.parse_args(argv)
    code: int = bench_args.handler(bench_args)
    print(
        f"duplexkit demo: talk to {args.model} live: run `duplexkit serve --model {args.model}`, "
        f"then open {playground_url('127.0.0.1', 8000)} in a browser"
    )
    return code
