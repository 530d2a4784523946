"""The `duplexkit` command: one subcommand per job (serve, talk, bench, score, report, demo).

Exit codes: 0 success, 1 the job ran and failed, 2 bad usage or a capability this version does not have.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from duplexkit import __version__

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2

Handler = Callable[[argparse.Namespace], int]


def _not_in_this_version(issue: str) -> Handler:
    def run(args: argparse.Namespace) -> int:
        print(
            f"duplexkit {args.command}: not available in duplexkit {__version__} yet ({issue}).",
            file=sys.stderr,
        )
        return EXIT_USAGE

    return run


def build_parser() -> argparse.ArgumentParser:
    """The whole command line, so `--help` documents every subcommand and option."""
    parser = argparse.ArgumentParser(
        prog="duplexkit",
        description="Serve, drive and evaluate full-duplex speech and omni models over a realtime WebSocket.",
    )
    parser.add_argument("--version", action="version", version=f"duplexkit {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    from duplexkit.commands import register_all

    register_all(commands)
    for name, summary, issue in (
        ("report", "write the HTML report of a benchmark run", "run report"),
    ):
        sub = commands.add_parser(name, help=f"{summary} (not in this version yet)", description=summary)
        sub.set_defaults(handler=_not_in_this_version(issue))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    handler: Handler = args.handler
    try:
        return handler(args)
    except KeyboardInterrupt:
        return 130
