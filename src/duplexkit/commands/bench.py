"""`duplexkit bench`: run a benchmark (Omni-DuplexEval, OmniInteract, Full-Duplex-Bench) against a server
(or the embedded one) into a resumable folder."""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

from duplexkit.bench.benchmark import BENCHMARKS, DEFAULT_BENCHMARK, FolderScorer
from duplexkit.bench.job import BenchJob, run_job
from duplexkit.client.collector import SENTENCE_TIMINGS
from duplexkit.commands.options import (
    AUDIO_FORMATS,
    add_audio_format_option,
    add_bound_options,
    add_model_options,
    add_placement_option,
    add_protocol_option,
    bounds_from_args,
    check_audio_format,
    default_chunk_ms,
    json_object,
    model_args_from_args,
    model_from_args,
    placement_from_args,
    resolve_protocol,
)
from duplexkit.commands.score import (
    add_fdb2_options,
    add_fdb3_options,
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
        "duplex with no commit and writes FDB sample folders under RUN_DIR/<task folder>/<id>/; fdb3 "
        "(Full-Duplex-Bench v3) streams as FDB-v3 does, answers the model's function calls with its 12 mock "
        "APIs and writes its recording folders under RUN_DIR/<domain>/<example>_<speaker>/ "
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
        "offline) or a folder of FDB sample folders (or of task folders of them); fdb3: 'builtin' "
        "(synthetic, generated offline), a folder of FDB-v3 recording folders "
        "({example_id}_{speaker_id}/input.wav), or its HF id in the local cache",
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
    add_audio_format_option(target, "--audio-format")
    target.add_argument(
        "--sentence-timing",
        choices=SENTENCE_TIMINGS,
        default="audio",
        help="Omni-DuplexEval: how a sentence is timed: 'audio' (default), the span of its own audio on the "
        "timeline; 'arrival', the arrival of its first and last deltas read on the media clock sent, as "
        "vLLM-Omni's benchmark runner times them (to compare with its nightly numbers); run.json and each "
        "sample's meta record which",
    )
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
        help="audio per append in ms (default: the protocol's, 20 for webrtc, 80 for moshi, else 200)",
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
    add_fdb3_options(parser, run=True)
    add_fdb2_options(parser, run=True)
    parser.set_defaults(handler=lambda args: run_command(args, parser))


def run_command(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """Run `duplexkit bench` as `args` say (`parser`, the bench parser, tells an option given from its
    default)."""
    from duplexkit.bench.artifacts import check_splits, resume_mismatch
    from duplexkit.bench.benchmark import get_benchmark
    from duplexkit.bench.errors import ConfigError
    from duplexkit.bench.shard import Shard, ShardError
    from duplexkit.bench.sources import DatasetError

    try:
        shard = Shard.parse(args.shard) if args.shard is not None else None
    except ShardError as exc:
        return _usage(str(exc))

    examiner_args = _pairs(args.examiner_arg)
    if examiner_args is None:
        return _usage("--examiner-arg takes KEY=VALUE")
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
        or (args.duration is not None and args.duration <= 0)
    ):
        return _usage("--concurrency, --limit, --fps, --chunk-ms and --duration must be positive")
    selection = benchmark.selection_from_json(
        {
            "splits": args.split,
            "family": args.family,
            "subsets": args.subset,
            "scenarios": args.scenario,
            "tasks": args.task,
            "tool_latency": args.tool_latency,
            "scenarios_file": args.scenarios,
            "oracle_calls": args.oracle_calls,
            "pacing": args.pacing,
            "duration_s": args.duration,
            "stages": args.stages,
            "examiner_url": args.examiner_url,
            "examiner_protocol": args.examiner_protocol,
            "examiner_model": args.examiner_model,
            "examiner_args": examiner_args,
            "ids": args.ids,
            "exclude_ids": args.exclude_ids,
            "limit": args.limit,
        }
    )
    try:
        benchmark.check_config(keep_audio=not args.no_audio, score=args.score, scoring=scoring_options(args))
        dataset = benchmark.load_dataset(args.dataset, selection)
        benchmark.check_out(args.out, dataset)
        check_splits(s.split for s in dataset.samples)
    except (ConfigError, DatasetError) as exc:
        return _usage(str(exc))
    refusal = check_audio_format(
        AUDIO_FORMATS[args.audio_format], resolve_protocol(args.protocol, args.url[0] if args.url else None)
    )
    if refusal is not None:
        return _usage(f"--audio-format {args.audio_format}: {refusal}")
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
    folder_scorer = benchmark.folder_scorer if args.score else None
    job = BenchJob(
        benchmark=benchmark,
        dataset=dataset,
        samples=list(dataset.samples) if shard is None else shard.select(dataset.samples),
        selection=selection,
        shard=shard,
        out=args.out,
        model=args.served_model if args.url else args.model,
        command=_redacted(sys.argv),
        urls=list(args.url),
        plugin=plugin,
        model_args=None if args.url else model_args_from_args(args),
        api_key=args.api_key,
        protocol=args.protocol,
        audio_format=AUDIO_FORMATS[args.audio_format],
        placement=placement_from_args(args),
        sentence_timing=args.sentence_timing,
        pace=args.pace,
        fps=args.fps,
        chunk_ms=args.chunk_ms
        or default_chunk_ms(resolve_protocol(args.protocol, args.url[0] if args.url else None)),
        concurrency=args.concurrency,
        bounds=bounds_from_args(args, benchmark.bounds),
        keep_audio=not args.no_audio,
        resume=not args.no_resume,
        extra_body=args.extra_body,
        overwrite=args.overwrite,
        allow_invalid_clock=args.allow_invalid_clock,
        judge=judge,
        score_folder=None if folder_scorer is None else _folder_scoring(args, folder_scorer),
        report=args.report,
    )
    try:
        return asyncio.run(run_job(job))
    except KeyboardInterrupt:
        print("duplexkit bench: interrupted; rerun the same command to resume", file=sys.stderr)
        return 130


def _folder_scoring(args: argparse.Namespace, scorer: FolderScorer) -> Callable[[Path], Awaitable[int]]:
    """`bench --score` for a benchmark with its own folder scorer: `duplexkit score`'s, on the run folder."""
    return lambda root: score_folder(args, root, scorer, args.concurrency)


_SECRET_OPTIONS = ("--api-key", "--judge-api-key")


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


def _pairs(values: list[str]) -> dict[str, str] | None:
    """`KEY=VALUE` options as a dict; `None` when one has no `=`."""
    if any("=" not in v for v in values):
        return None
    return dict(v.split("=", 1) for v in values)


def _dest(flag: str) -> str:
    return flag.lstrip("-").replace("-", "_")


def _usage(message: str) -> int:
    print(f"duplexkit bench: {message}", file=sys.stderr)
    return EXIT_USAGE
