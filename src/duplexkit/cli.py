"""The `duplexkit` command: one subcommand per job (serve, talk, bench, score, report, demo).

Exit codes: 0 success, 1 the job ran and failed, 2 bad usage, 130 interrupted.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence

from duplexkit import __version__

Handler = Callable[[argparse.Namespace], int]


def build_parser() -> argparse.ArgumentParser:
    """The whole command line, so `--help` documents every subcommand and option."""
    from duplexkit.commands import register_all

    parser = argparse.ArgumentParser(
        prog="duplexkit",
        description="Serve, drive and evaluate full-duplex speech and omni models over a realtime WebSocket.",
    )
    parser.add_argument("--version", action="version", version=f"duplexkit {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    register_all(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    handler: Handler = args.handler
    try:
        return handler(args)
    except KeyboardInterrupt:
        return 130
