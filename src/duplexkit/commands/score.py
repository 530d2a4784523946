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
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from duplexkit.bench.benchmark import BENCHMARKS, DEFAULT_BENCHMARK, benchmark_name_of_run
from duplexkit.bench.judge import ChatClient, Judge, JudgeUnreachable, RunError, Summary, score_run
from duplexkit.bench.omni_duplex_eval import BUILTIN_PROMPTS, BuiltinJudge, LLMJudge, load_protocol_dir
from duplexkit.bench.omni_duplex_eval.windows import REMINDER_WINDOW_S

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


def judge_from_args(
    args: argparse.Namespace, dataset_source: str | None, concurrency: int, benchmark: str = DEFAULT_BENCHMARK
) -> Judge | None:
    """The judge the options name for `benchmark` (at most `concurrency` requests in flight), or None after
    printing why it cannot be built.

    `dataset_source` is the run's dataset spec: with neither --judge nor --judge-url, a run on the built-in
    dataset (`builtin`) gets the builtin judge.
    """
    kind = args.judge or ("llm" if args.judge_url else "builtin" if dataset_source == "builtin" else None)
    if kind is None:
        _usage(
            args, "give --judge-url URL and --judge-model NAME (or --judge builtin for the built-in dataset)"
        )
        return None
    if not args.reminder_window > 0:
        _usage(args, "--reminder-window must be positive")
        return None
    if benchmark == "omniinteract" and args.protocol_dir is not None:
        _usage(args, "--protocol-dir holds Omni-DuplexEval prompts; OmniInteract uses its own")
        return None
    if kind == "builtin":
        if args.judge_url or args.judge_model or args.protocol_dir:
            _usage(args, "--judge builtin takes no --judge-url, --judge-model or --protocol-dir")
            return None
        if benchmark == "omniinteract":
            from duplexkit.bench.omniinteract.builtin_judge import BuiltinJudge as OmniBuiltinJudge

            return OmniBuiltinJudge()
        return BuiltinJudge(reminder_window_s=args.reminder_window)
    if not args.judge_url or not args.judge_model:
        _usage(args, "an LLM judge needs both --judge-url and --judge-model")
        return None
    if args.judge_timeout <= 0:
        _usage(args, "--judge-timeout must be positive")
        return None
    key = args.judge_api_key or os.environ.get(API_KEY_ENV) or "none"
    if benchmark == "omniinteract":
        from duplexkit.bench.omniinteract import judge as omni

        chat = ChatClient(
            base_url=args.judge_url,
            model=args.judge_model,
            api_key=key,
            concurrency=concurrency,
            timeout_s=args.judge_timeout,
            temperature=omni.TEMPERATURE,
            max_tokens=omni.MAX_TOKENS,
        )
        return omni.LLMJudge(chat)
    prompts = BUILTIN_PROMPTS
    if args.protocol_dir is not None:
        try:
            prompts = load_protocol_dir(args.protocol_dir)
        except ValueError as exc:
            _usage(args, str(exc))
            return None
    chat = ChatClient(
        base_url=args.judge_url,
        model=args.judge_model,
        api_key=key,
        concurrency=concurrency,
        timeout_s=args.judge_timeout,
    )
    return LLMJudge(chat, prompts, reminder_window_s=args.reminder_window)


def run(args: argparse.Namespace) -> int:
    if (args.benchmark or benchmark_name_of_run(args.run_dir)) == "fdb":
        return score_fdb(args, args.run_dir)
    if args.icc_distribution or args.words != "keep" or args.transcription_url or args.transcription_model:
        _usage(args, "--icc-distribution, --words and --transcription-* are Full-Duplex-Bench options")
        return 2
    if args.workers < 1:
        _usage(args, "--workers must be at least 1")
        return 2
    judge = judge_from_args(
        args, _dataset_source(args.run_dir), args.workers, benchmark_name_of_run(args.run_dir)
    )
    if judge is None:
        return 2
    try:
        summary = asyncio.run(_score(args, judge))
    except RunError as exc:
        print(f"duplexkit score: {exc}", file=sys.stderr)
        return 2
    except JudgeUnreachable as exc:
        print(f"duplexkit score: {exc}; scores written so far are kept and reused next time", file=sys.stderr)
        return 1
    print(format_summary(summary))
    print(f"wrote {args.run_dir / 'scores' / 'summary.json'}")
    return 0 if summary.complete else 1


async def _score(args: argparse.Namespace, judge: Judge) -> Summary:
    try:
        return await score_run(
            args.run_dir, judge, workers=args.workers, allow_invalid_clock=args.allow_invalid_clock
        )
    finally:
        await judge.aclose()


def _recorded_pace(run_dir: Path) -> str | None:
    """The pace `run_dir/run.json` records; `None` for a folder that is not a run (anyone's FDB outputs)."""
    try:
        pace = json.loads((run_dir / "run.json").read_text(encoding="utf-8"))["config"]["pace"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return pace if isinstance(pace, str) else None


def _dataset_source(run_dir: Path) -> str | None:
    try:
        source = json.loads((run_dir / "run.json").read_text(encoding="utf-8"))["dataset"]["source"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return source if isinstance(source, str) else None


def format_summary(summary: Summary) -> str:
    """A few lines for the terminal: coverage, then the benchmark's headline numbers."""
    info, cov = summary.judge, summary.coverage
    judge = info.model if info.kind == "builtin" else f"{info.model} at {info.url}, prompts"
    lines = [
        f"judge {judge} {info.prompt_version}: scored {cov['scored']}/{cov['total']} samples "
        f"({cov['cached']} cached), skipped {cov['skipped']} failed, {cov['errors']} errors",
    ]
    recorded = summary.to_json()
    if recorded.get("benchmark") == "omniinteract":
        return "\n".join(lines + _omniinteract_lines(recorded, info.kind == "builtin"))
    for name, section, means in (
        ("RTD", recorded["rtd"], ("mean_content_score", "mean_avg_temporal_score")),
        ("PR", recorded["pr"], ("mean_all_success",)),
    ):
        if section["samples"]:
            lines.append(_row(name, section, means))
            lines += [_row(f"  {task}", group, means) for task, group in section["by_task"].items()]
    if info.kind == "builtin":
        lines.append("note: builtin judge scores are not comparable to published Omni-DuplexEval numbers")
    return "\n".join(lines)


def _omniinteract_lines(recorded: Mapping[str, Any], builtin: bool) -> list[str]:
    def f1(group: Mapping[str, Any]) -> str:
        value = group.get("ia_qtf1")
        return "-" if value is None else f"{value:.3f}"

    scores = recorded["ia_qtf1"]
    lines = [f"IA-QTF1 All Global={f1(scores)}  1Q1A Global={f1(scores.get('1q1a_global') or {})}"]
    lines += [
        f"  {name}: {f1(group)}  (n={group.get('samples')})"
        for name, group in scores["by_scenario"].items()
        if name != "1Q1A Global"
    ]
    lines += [
        f"  subset {name}: {f1(group)}  (n={group.get('samples')})"
        for name, group in recorded["subsets"]["by_subset"].items()
    ]
    shown = {k: "-" if v is None else f"{v:.3f}" for k, v in recorded["interruption"].items()}
    lines.append("  " + "  ".join(f"{k.upper()}={v}" for k, v in shown.items()))
    eligibility = recorded["eligibility"]
    if not eligibility["eligible"]:
        cases = ", ".join(c["case"] for c in eligibility["ineligible_cases"])
        lines.append(f"not eligible for official scoring (clipped, cancelled or cleared responses): {cases}")
    if builtin:
        lines.append("note: builtin judge scores are not comparable to published OmniInteract numbers")
    return lines


def _row(label: str, group: Mapping[str, Any], means: tuple[str, ...]) -> str:
    values = "  ".join(f"{m}={'-' if group[m] is None else format(group[m], '.3f')}" for m in means)
    return f"{label}: {values}  (n={group['samples']})"


def _usage(args: argparse.Namespace, message: str) -> None:
    print(f"duplexkit {args.command}: {message}", file=sys.stderr)


def score_fdb(args: argparse.Namespace, root: Path) -> int:
    """`fdb_scores` run to completion (the `duplexkit score --benchmark fdb` entry point)."""
    return asyncio.run(fdb_scores(args, root))


async def fdb_scores(args: argparse.Namespace, root: Path) -> int:
    """Full-Duplex-Bench scores of the sample folders under `root` → `root/fdb_scores.json` and a table,
    after re-timing the words when --words asks for another source.

    The relevance judge runs when --judge-url and --judge-model are given; otherwise relevance is null.
    Exit 0 when every sample scored, 1 when some could not be, 2 on bad usage or a folder with no samples.
    """
    from duplexkit.bench.fdb.dataset import FdbDatasetError, find_samples
    from duplexkit.bench.fdb.judge import RelevanceJudge
    from duplexkit.bench.fdb.scoring import SCORES_FILE, format_table, read_distribution, score_dir
    from duplexkit.bench.fdb.words import TranscriptionEndpoint, retime_samples

    if args.judge == "builtin" or args.protocol_dir is not None:
        _usage(
            args,
            "fdb's only judge is the relevance LLM (--judge-url, --judge-model); no --judge builtin "
            "or --protocol-dir",
        )
        return 2
    if _recorded_pace(root) not in (None, "realtime") and not args.allow_invalid_clock:
        _usage(args, f"{root} was run as fast as possible (clock=invalid); add --allow-invalid-clock")
        return 2
    human = None
    if args.icc_distribution is not None:
        try:
            human = read_distribution(args.icc_distribution)
        except ValueError as exc:
            _usage(args, str(exc))
            return 2
    endpoint = None
    if args.words == "transcription":
        if not (args.transcription_url and args.transcription_model):
            _usage(args, "--words transcription needs --transcription-url and --transcription-model")
            return 2
        endpoint = TranscriptionEndpoint(
            args.transcription_url,
            args.transcription_model,
            api_key=args.judge_api_key or os.environ.get(API_KEY_ENV) or "none",
        )
    judge = None
    if args.judge_url or args.judge_model:
        if not (args.judge_url and args.judge_model) or args.judge_timeout <= 0:
            _usage(
                args, "the relevance judge needs --judge-url, --judge-model and a positive --judge-timeout"
            )
            return 2
        judge = RelevanceJudge(
            ChatClient(
                base_url=args.judge_url,
                model=args.judge_model,
                api_key=args.judge_api_key or os.environ.get(API_KEY_ENV) or "none",
                concurrency=int(getattr(args, "workers", 0) or getattr(args, "concurrency", 0) or 1),
                timeout_s=args.judge_timeout,
            )
        )
    try:
        if args.words in ("asr", "transcription"):
            failed = await retime_samples(find_samples(root), args.words, endpoint)
            for where, error in failed:
                print(f"duplexkit {args.command}: {where}: {error}", file=sys.stderr)
        scores = await score_dir(root, human=human, judge=judge)
    except FdbDatasetError as exc:
        _usage(args, str(exc))
        return 2
    except JudgeUnreachable as exc:
        print(f"duplexkit {args.command}: {exc}", file=sys.stderr)
        return 1
    finally:
        if judge is not None:
            await judge.aclose()
    print(format_table(scores))
    print(f"wrote {root / SCORES_FILE}")
    return 1 if any(t["errors"] for t in scores["tasks"].values()) else 0
