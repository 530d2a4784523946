"""`duplexkit merge`: join shards and pool runs into one run folder (see `duplexkit.bench.merge`).

Exit codes: 0 merged; 2 the inputs cannot be merged (the message starts with the refusal's code).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "merge",
        help="merge shards and pool runs into one run folder",
        description="Merge run folders of the same run (its `--shard i/n` parts, or runs over other servers) "
        "by (split, sample id) into a new folder that `duplexkit score` and `duplexkit report` read like any "
        "run. Runs of another dataset selection, benchmark, pace, protocol, fps or chunk size are refused; "
        "a sample published in two inputs is refused, a failure is replaced by a publication of the same "
        "sample.",
    )
    parser.add_argument(
        "run_dirs", type=Path, nargs="+", metavar="RUN_DIR", help="run folders written by `duplexkit bench`"
    )
    parser.add_argument(
        "--out", required=True, type=Path, metavar="MERGED_DIR", help="the merged folder (new or empty)"
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from duplexkit.bench.merge import MergeError, merge_runs

    try:
        result = merge_runs(args.run_dirs, args.out)
    except MergeError as exc:
        print(f"duplexkit merge: {exc}", file=sys.stderr)
        return 2
    counts = result.counts
    shards = result.shards
    held = (
        ""
        if shards is None
        else f" · shards {', '.join(shards['parts'])}"
        + (
            ""
            if shards["complete"]
            else f" (incomplete: {shards['unattempted']} selected sample(s) never attempted)"
            if shards["unattempted"]
            else " (incomplete: parts missing)"
        )
    )
    whole = result.completeness
    if shards is None and not whole["complete"]:
        held = f" (incomplete: {whole['attempted']} of {whole['selected']} selected samples attempted)"
    print(
        f"merged {len(args.run_dirs)} runs → {result.out}: {result.samples} samples · published "
        f"{counts['published']} · failed {counts['failed']}{held}"
    )
    return 0
