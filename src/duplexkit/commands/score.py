"""`duplexkit score`: judge every published sample of a run and write RUN_DIR/scores/ (see docs/scoring.md;
OmniInteract: docs/omniinteract.md). The run's benchmark comes from its `run.json`.

Exit codes: 0 every published sample scored; 1 some samples could not be scored (the summary says which
counts) or the judge was unreachable; 2 bad usage, not a run folder, or clock=invalid samples without
`--allow-invalid-clock`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

from duplexkit.bench.artifacts import RunDir
from duplexkit.bench.benchmark import (
    BENCHMARKS,
    DEFAULT_BENCHMARK,
    Benchmark,
    FolderScorer,
    benchmark_name_of_run,
    get_benchmark,
)
from duplexkit.bench.errors import ConfigError
from duplexkit.bench.judge import (
    Judge,
    JudgeSettings,
    JudgeUnreachable,
    RunError,
    Summary,
    format_summary,
    make_judge,
    score_run,
)
from duplexkit.bench.omni_duplex_eval.windows import REMINDER_WINDOW_S
from duplexkit.bench.sources import DatasetError

API_KEY_ENV = "DUPLEXKIT_JUDGE_API_KEY"


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "score",
        help="score a benchmark run with an LLM judge (or offline for the built-in dataset)",
        description="Judge every published sample of RUN_DIR by its benchmark's rubric (Omni-DuplexEval or "
        "OmniInteract, as run.json says) and write RUN_DIR/scores/<split>/<id>.json and "
        "RUN_DIR/scores/summary.json. Scores are reused while the "
        "response, the judge model, the judge URL and the prompt version are unchanged.",
    )
    parser.add_argument(
        "run_dir", type=Path, metavar="RUN_DIR", help="a run folder written by `duplexkit bench`"
    )
    parser.add_argument(
        "--benchmark",
        choices=sorted(BENCHMARKS),
        default=None,
        help="the benchmark's rules to score by (default: the one RUN_DIR/run.json names; fdb also scores "
        "any folder of Full-Duplex-Bench sample folders holding output.wav and output.json)",
    )
    add_fdb_options(parser)
    add_fdb3_options(parser, run=False)
    add_fdb2_options(parser, run=False)
    add_judge_options(parser)
    parser.add_argument(
        "--workers", type=int, default=4, help="samples and judge requests in flight (default: %(default)s)"
    )
    parser.add_argument(
        "--allow-invalid-clock",
        action="store_true",
        help="score samples run at as-fast-as-possible pace (clock=invalid) anyway",
    )
    parser.set_defaults(handler=run)


def add_fdb_options(parser: argparse.ArgumentParser) -> None:
    """Full-Duplex-Bench's scoring options, shared with `duplexkit bench --benchmark fdb`."""
    group = parser.add_argument_group("Full-Duplex-Bench (fdb)")
    group.add_argument(
        "--icc-distribution",
        type=Path,
        metavar="PATH",
        help="the human backchannel timing distributions ({sample_id: [p, ...]}, upstream's "
        "icc_gt_distribution.json); without it JSD is reported unavailable",
    )
    group.add_argument(
        "--words",
        choices=["keep", "asr", "transcription"],
        default="keep",
        help="where output.json's word times come from: keep the output.json each folder holds (a bench run "
        "writes it from the server's transcript and audio_text_marks); asr re-times every output.wav "
        "offline (faster-whisper if installed with packaged weights, else pocketsphinx); transcription "
        "sends it to --transcription-url (default: %(default)s)",
    )
    group.add_argument(
        "--transcription-url",
        metavar="URL",
        help="OpenAI-compatible base URL serving /audio/transcriptions with word timestamps",
    )
    group.add_argument("--transcription-model", metavar="NAME", help="model name for --transcription-url")


def add_fdb3_options(parser: argparse.ArgumentParser, *, run: bool) -> None:
    """FDB-v3's options: `bench` takes the mock APIs' latency profile, `score` whose results to read; both
    take the scenario file for recording folders without their own metadata.json."""
    group = parser.add_argument_group("Full-Duplex-Bench v3 (fdb3)")
    group.add_argument(
        "--scenarios",
        type=Path,
        metavar="PATH",
        help="fdb3: FDB-v3's scenario file (benchmark_data_v2.json) for recording folders without a "
        "metadata.json (default: one in the data folder, beside it or one level up)",
    )
    if run:
        from duplexkit.bench.fdb3.apis import PROFILE_CHOICES

        group.add_argument(
            "--tool-latency",
            choices=PROFILE_CHOICES,
            default="instant",
            help="fdb3: the mock APIs' injected latency, FDB-v3's profiles (instant 0, fast 50-200 ms, "
            "normal 200-800, slow 1000-3000, degraded 500-2000 growing 1.5x a call, timeout_risk 3000-8000; "
            "per-api: FDB-v3's per-API table), drawn from a generator seeded by the recording "
            "(default: %(default)s, FDB-v3's)",
        )
        group.add_argument(
            "--oracle-calls",
            action="store_true",
            help="fdb3, a self-check of the harness: send each recording's expected calls as the session's "
            "extra_body tool_calls, which the scripted model makes (its results are flagged; they measure "
            "no model); the duplex protocol only, as the OpenAI dialects carry no extra_body",
        )
    else:
        group.add_argument(
            "--provider",
            default=None,
            metavar="NAME",
            help="fdb3: score result_NAME.json (FDB-v3's provider name, e.g. gpt_realtime for its own runs; "
            "default: duplexkit, what duplexkit's runs write)",
        )


def add_fdb2_options(parser: argparse.ArgumentParser, *, run: bool) -> None:
    """FDB v2's options: `bench` takes the examiner and the conversation's pacing, both take the judge's
    rubrics."""
    group = parser.add_argument_group("Full-Duplex-Bench v2 (fdb2)")
    group.add_argument(
        "--fdb2-prompts",
        type=Path,
        metavar="PATH",
        help="fdb2: your copy of FDB v2's judge prompts (v2/eval/eval_prompts.json, CC BY-NC, not shipped); "
        "without it duplexkit's own rubric wording is used and the scores are marked not comparable",
    )
    if not run:
        return
    group.add_argument(
        "--examiner-url",
        metavar="URL",
        help="fdb2: the realtime server playing the examiner (e.g. OpenAI's, its key from "
        "$DUPLEXKIT_EXAMINER_API_KEY or $OPENAI_API_KEY); default: duplexkit's cascade embedded in process, "
        "offline",
    )
    group.add_argument(
        "--examiner-protocol",
        choices=["auto", "duplex", "openai", "openai-beta", "webrtc"],
        default="auto",
        help="fdb2: the examiner's wire protocol (default: %(default)s)",
    )
    group.add_argument(
        "--examiner-model", metavar="NAME", help="fdb2: the examiner's `model` query parameter"
    )
    group.add_argument(
        "--examiner-arg",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="fdb2: a model argument of the embedded cascade examiner (repeatable; e.g. responder=echo)",
    )
    group.add_argument(
        "--pacing",
        choices=["slow", "fast"],
        default="slow",
        help="fdb2: the examiner's turn detection as FDB v2 sets GPT-Realtime's: slow (server VAD, "
        "interruptible) or fast (threshold 0.6, 1200 ms prefix, 600 ms silence, not interruptible) "
        "(default: %(default)s)",
    )
    group.add_argument(
        "--duration",
        type=float,
        default=None,
        metavar="S",
        help="fdb2: seconds of conversation per task (default: 120, FDB v2's)",
    )
    group.add_argument(
        "--stages",
        choices=["prompt", "turns"],
        default="prompt",
        help="fdb2: prompt gives the examiner the whole task prompt at the start, as FDB v2 does; turns "
        "also adds each next staged goal (T2-T4) to its instructions once the examinee finished a turn "
        "(default: %(default)s)",
    )


def add_judge_options(parser: argparse.ArgumentParser) -> None:
    """The judge options, shared with `duplexkit bench --score`."""
    group = parser.add_argument_group("judge")
    group.add_argument(
        "--judge",
        choices=["llm", "builtin"],
        help="llm: an OpenAI-compatible judge model (needs --judge-url and --judge-model); builtin: offline "
        "scores from the built-in dataset's ground truth, not comparable to published numbers (default: llm "
        "when --judge-url is given, builtin for a run on the built-in dataset)",
    )
    group.add_argument(
        "--judge-url", metavar="URL", help="OpenAI-compatible base URL, e.g. http://host:8000/v1"
    )
    group.add_argument(
        "--judge-model", metavar="NAME", help="judge model name, e.g. Qwen/Qwen2.5-VL-7B-Instruct"
    )
    group.add_argument(
        "--judge-api-key", metavar="KEY", help=f"judge API key (default: ${API_KEY_ENV}, else none)"
    )
    group.add_argument(
        "--judge-timeout",
        type=float,
        default=120.0,
        metavar="S",
        help="per-request timeout (default: %(default)s)",
    )
    group.add_argument(
        "--reminder-window",
        type=float,
        default=REMINDER_WINDOW_S,
        metavar="S",
        help="Omni-DuplexEval: PR reminders are judged on the sentences starting in [t, t + S] "
        "(default: %(default)s)",
    )
    group.add_argument(
        "--protocol-dir",
        type=Path,
        metavar="DIR",
        help="Omni-DuplexEval: read the five judge prompts from DIR/<name>.txt (a local copy of the "
        "reference scorer's texts; see docs/scoring.md) instead of duplexkit's own",
    )


def judge_settings(args: argparse.Namespace, concurrency: int) -> JudgeSettings:
    """The judge options as `JudgeSettings`, at most `concurrency` requests in flight (the API key from
    $DUPLEXKIT_JUDGE_API_KEY when not given)."""
    return JudgeSettings(
        kind=args.judge,
        url=args.judge_url,
        model=args.judge_model,
        api_key=args.judge_api_key or os.environ.get(API_KEY_ENV) or "none",
        timeout_s=args.judge_timeout,
        concurrency=concurrency,
        reminder_window_s=args.reminder_window,
        protocol_dir=args.protocol_dir,
    )


def scoring_options(args: argparse.Namespace) -> dict[str, Any]:
    """The scoring options of `add_fdb_options`, by name (what a `FolderScorer` reads)."""
    names = (
        "icc_distribution",
        "words",
        "transcription_url",
        "transcription_model",
        "provider",
        "scenarios",
        "fdb2_prompts",
    )
    return {name: getattr(args, name, None) for name in names}


def judge_from_args(
    args: argparse.Namespace, dataset_source: str | None, concurrency: int, benchmark: str = DEFAULT_BENCHMARK
) -> Judge | None:
    """The judge the options name for `benchmark` (at most `concurrency` requests in flight), or None after
    printing why it cannot be built (`make_judge`; `dataset_source` is the run's dataset spec)."""
    scoring = get_benchmark(benchmark).judge_scoring
    if scoring is None:
        _usage(args, f"{benchmark} runs are not scored by a judge of this command's options")
        return None
    try:
        return make_judge(scoring, judge_settings(args, concurrency), dataset_source)
    except ConfigError as exc:
        _usage(args, str(exc))
        return None


def run(args: argparse.Namespace) -> int:
    recorded = benchmark_name_of_run(args.run_dir)
    if args.benchmark and args.benchmark != recorded and (args.run_dir / "run.json").is_file():
        _usage(args, f"RUN_DIR is a {recorded} run; it cannot be scored by {args.benchmark}'s rules")
        return 2
    scorer = get_benchmark(args.benchmark or recorded).folder_scorer
    if scorer is not None:
        return asyncio.run(score_folder(args, args.run_dir, scorer, args.workers or 1))
    if args.icc_distribution or args.words != "keep" or args.transcription_url or args.transcription_model:
        _usage(args, "--icc-distribution, --words and --transcription-* are Full-Duplex-Bench options")
        return 2
    if args.provider or args.scenarios:
        _usage(args, "--provider and --scenarios are Full-Duplex-Bench v3 options")
        return 2
    if args.workers < 1:
        _usage(args, "--workers must be at least 1")
        return 2
    benchmark = get_benchmark(recorded)
    judge = judge_from_args(args, _dataset_source(args.run_dir), args.workers, benchmark.name)
    if judge is None:
        return 2
    try:
        summary = asyncio.run(_score(args, judge, benchmark))
    except RunError as exc:
        print(f"duplexkit score: {exc}", file=sys.stderr)
        return 2
    except JudgeUnreachable as exc:
        print(f"duplexkit score: {exc}; scores written so far are kept and reused next time", file=sys.stderr)
        return 1
    print(format_summary(summary, benchmark))
    print(f"wrote {RunDir(args.run_dir).scores_summary}")
    return 0 if summary.complete else 1


async def _score(args: argparse.Namespace, judge: Judge, benchmark: Benchmark) -> Summary:
    try:
        return await score_run(
            args.run_dir,
            judge,
            workers=args.workers,
            allow_invalid_clock=args.allow_invalid_clock,
            benchmark=benchmark,
        )
    finally:
        await judge.aclose()


def _dataset_source(run_dir: Path) -> str | None:
    try:
        source = json.loads((run_dir / "run.json").read_text(encoding="utf-8"))["dataset"]["source"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return source if isinstance(source, str) else None


async def score_folder(args: argparse.Namespace, root: Path, scorer: FolderScorer, concurrency: int) -> int:
    """`scorer` on `root` with the judge and scoring options (its relevance judge, if any, at most
    `concurrency` requests in flight), its table printed: the `duplexkit score` entry point of a benchmark
    that scores by its own rules, also run by `bench --score`.

    Exit 0 when every sample scored, 1 when some could not be or the judge was unreachable, 2 on bad usage or
    a folder with no samples.
    """
    try:
        scores = await scorer.score(
            root,
            judge_settings(args, concurrency),
            scoring_options(args),
            allow_invalid_clock=args.allow_invalid_clock,
            warn=lambda message: _usage(args, message),
        )
    except (ConfigError, DatasetError) as exc:
        _usage(args, str(exc))
        return 2
    except JudgeUnreachable as exc:
        _usage(args, str(exc))
        return 1
    print(scores.text)
    print(f"wrote {scores.written}")
    return 0 if scores.complete else 1


def _usage(args: argparse.Namespace, message: str) -> None:
    print(f"duplexkit {args.command}: {message}", file=sys.stderr)
