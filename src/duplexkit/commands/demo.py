"""`duplexkit demo`: the whole job on the embedded default, offline.

Runs the built-in benchmark against the embedded server and the built-in model at realtime pace, at the
concurrency the model sustains at full speed (its `reply_capacity`, else one session per CPU core), scores
it with the offline builtin judge, writes the HTML report, and prints the summary table, the scores and
where everything is, then the commands that open the same model in the browser playground. Rerunning
resumes the same run folder.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from pathlib import Path

from duplexkit.commands.options import DEFAULT_MODEL, MODEL_CHOICES, positive_int

EXIT_USAGE = 2


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "demo",
        help="run the built-in benchmark on the embedded model, score it offline, write the report",
        description="The whole job offline: the built-in benchmark against the embedded server, at the "
        "concurrency the model sustains at full speed, scored by the builtin judge, with the report. "
        "Exit codes as for bench.",
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
    parser.add_argument("--limit", type=positive_int, default=None, help="run only this many samples")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from duplexkit.bench.artifacts import resume_mismatch
    from duplexkit.bench.benchmark import DEFAULT_BENCHMARK, get_benchmark
    from duplexkit.bench.job import BenchJob, run_job
    from duplexkit.bench.judge import JudgeSettings, make_judge
    from duplexkit.models import load_model

    benchmark = get_benchmark(DEFAULT_BENCHMARK)
    selection = benchmark.selection_from_json({"limit": args.limit})
    dataset = benchmark.load_dataset("builtin", selection)
    mismatch = resume_mismatch(
        args.out,
        benchmark=benchmark.name,
        fingerprint=dataset.fingerprint,
        pace=args.pace,
        urls=[],
        shard=None,
    )
    if mismatch:
        print(f"duplexkit demo: {args.out} holds a run of {mismatch}; use another --out", file=sys.stderr)
        return EXIT_USAGE
    try:
        plugin = load_model(args.model, {})
    except ValueError as exc:
        print(f"duplexkit demo: {exc}", file=sys.stderr)
        return EXIT_USAGE
    cores = os.cpu_count() or 1
    if plugin.reply_capacity is not None:
        concurrency = plugin.reply_capacity.replies
        why = plugin.reply_capacity.why
    else:
        concurrency, why = cores, f"no bound of its own, so one session per CPU core ({cores})"
    print(
        f"duplexkit demo: {len(dataset.samples)} sample{'' if len(dataset.samples) == 1 else 's'} of the "
        f"built-in {benchmark.title} set, "
        f"{concurrency} at a time ({args.model}: {why}); more at once would queue their replies and show "
        "the queue's latency, not the model's"
    )
    judge = make_judge(benchmark, JudgeSettings(kind="builtin", concurrency=concurrency), dataset.source)
    job = BenchJob(
        benchmark=benchmark,
        dataset=dataset,
        samples=list(dataset.samples),
        selection=selection,
        out=args.out,
        model=args.model,
        command=list(sys.argv),
        plugin=plugin,
        model_args={},
        pace=args.pace,
        concurrency=concurrency,
        allow_invalid_clock=args.pace != "realtime",
        judge=judge,
        report=True,
    )
    code = asyncio.run(run_job(job))
    model = "" if args.model == DEFAULT_MODEL else f" --model {args.model}"
    from duplexkit.server.playground import playground_url

    print(f"duplexkit demo: talk to {args.model} live in a browser: start its server with")
    print(f"  {_executable()} serve{model}")
    print(f"then open {playground_url('127.0.0.1', 8000)} (Ctrl-C stops the server)")
    return code


def _executable() -> str:
    """This `duplexkit` as a command that works from the current directory (`.venv/bin/duplexkit` after
    `make demo`), or plain `duplexkit` when the script is not found beside this Python."""
    script = Path(sys.executable).parent / "duplexkit"
    if not script.is_file():
        return "duplexkit"
    try:
        return str(script.absolute().relative_to(Path.cwd()))
    except ValueError:
        return str(script.absolute())
