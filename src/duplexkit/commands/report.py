"""`duplexkit report`: write RUN_DIR/report.html, one self-contained page about a benchmark run.

Exit codes: 0 the report was written; 2 a folder is not a run folder.
"""

from __future__ import annotations

import argparse
import sys
import webbrowser
from pathlib import Path


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "report",
        help="write the HTML report of a benchmark run",
        description="Write RUN_DIR/report.html: run details and coverage, scores by family and task (when "
        "`duplexkit score` has run), latency distributions by measurement source, and a media-clock timeline "
        "per sample. The file opens from disk and loads nothing from the network.",
    )
    parser.add_argument(
        "run_dir", type=Path, metavar="RUN_DIR", help="a run folder written by `duplexkit bench`"
    )
    parser.add_argument(
        "--compare",
        type=Path,
        nargs="+",
        action="extend",
        default=[],
        metavar="OTHER_RUN_DIR",
        help="other run folders to show side by side, with their differences to RUN_DIR (repeatable)",
    )
    parser.add_argument("--open", action="store_true", help="open the report in the default browser")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from duplexkit.bench.report import ReportError, write_report

    try:
        path = write_report(args.run_dir, args.compare)
    except ReportError as exc:
        print(f"duplexkit report: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {path}")
    if args.open:
        webbrowser.open(path.resolve().as_uri())
    return 0
