"""Score a run folder: every published sample judged once, cached, summarised.

Writes under RUN_DIR/scores/: `<split>/<id>.json` per published sample, `<split>/<id>.trace.jsonl` when a
judge reply of that sample needed a follow-up, and `summary.json`. Every file names the judge (kind, model,
URL, prompt version and source).

- Failed samples (meta `status: failed`, or no `<id>.json`) are never judged; they count in `total` and
  `skipped`, score 0 in the means, and any stale score of theirs is removed.
- A score file is reused only when its status is `scored` and the response file's sha256, the judge model,
  the judge URL and the prompt version all match; anything else is judged again.
- A sample the judge cannot score (`ScoringError`) gets a score file with `status: error` and counts in
  `errors`; it stays in the means' denominator (scoring 0, the summary says `complete: false`) and is
  judged again next time.
- The summary is the benchmark's (`Benchmark.summarise`; Omni-DuplexEval: RTD `mean_content_score` /
  `mean_avg_temporal_score` and PR `mean_all_success`, overall and per task, over every attempted
  sample), and what a judge is asked about a sample is too (`Benchmark.score_request`).
- Samples whose meta says `clock: invalid` (as-fast-as-possible pace) are refused unless
  `allow_invalid_clock`: their sentence times are not media times.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from duplexkit.bench.artifacts import RunDir, write_bytes_atomic, write_json_atomic
from duplexkit.bench.benchmark import Benchmark, benchmark_name_of_run, get_benchmark
from duplexkit.bench.judge.base import Judge, JudgeInfo, ScoringError

SCORES_DIR = "scores"


class RunError(ValueError):
    """The run folder cannot be scored as asked (missing, unreadable, or clock=invalid without consent)."""


class MediaSample(Protocol):
    """What scoring needs from any dataset sample; its benchmark's `score_request` reads the rest."""

    @property
    def split(self) -> str: ...
    @property
    def id(self) -> str: ...


class Summary(Protocol):
    """A benchmark's `scores/summary.json`: `coverage` has total, scored, skipped, errors, cached."""

    @property
    def judge(self) -> JudgeInfo: ...
    @property
    def coverage(self) -> Mapping[str, int]: ...
    @property
    def complete(self) -> bool: ...
    def to_json(self) -> dict[str, Any]: ...


def format_summary(summary: Summary, benchmark: Benchmark) -> str:
    """A few lines for the terminal: coverage, then `benchmark`'s headline numbers (its `summary_lines`),
    then a note when a builtin judge scored (its numbers are not comparable to published ones)."""
    info, cov = summary.judge, summary.coverage
    judge = info.model if info.kind == "builtin" else f"{info.model} at {info.url}, prompts"
    lines = [
        f"judge {judge} {info.prompt_version}: scored {cov['scored']}/{cov['total']} samples "
        f"({cov['cached']} cached), skipped {cov['skipped']} failed, {cov['errors']} errors",
        *benchmark.summary_lines(summary.to_json()),
    ]
    if info.kind == "builtin":
        lines.append(f"note: builtin judge scores are not comparable to published {benchmark.title} numbers")
    return "\n".join(lines)


async def score_run(
    run_dir: Path,
    judge: Judge,
    *,
    workers: int = 4,
    samples: Iterable[MediaSample] | None = None,
    allow_invalid_clock: bool = False,
    benchmark: Benchmark | None = None,
) -> Summary:
    """Score every published sample of `run_dir` with `judge`, `workers` samples at a time; write and return
    the summary. `benchmark` defaults to the one `run.json` names.

    `samples` are the run's dataset samples (for video and ground truth); by default the dataset that
    `run.json` records (`dataset.source` and `dataset.selection`) is loaded. Raises RunError (nothing
    written) when the folder is not a run, its dataset cannot be loaded, or it holds published `clock:
    invalid` samples without `allow_invalid_clock`; `JudgeUnreachable` aborts the run (scores written so
    far stay and are reused next time).
    """
    run = RunDir.open(run_dir)
    metas = _metas(run)
    hooks = benchmark or get_benchmark(benchmark_name_of_run(run_dir))
    invalid = [
        f"{m['split']}/{m['id']}"
        for m in metas
        if m.get("clock") == "invalid" and m.get("status") == "published"
    ]
    if invalid and not allow_invalid_clock:
        raise RunError(
            f"{len(invalid)} sample(s) ran with clock=invalid (as-fast-as-possible pace), e.g. {invalid[0]}: "
            "their sentence times are not media times; pass allow_invalid_clock (--allow-invalid-clock) to "
            "score them anyway"
        )
    by_key = {(s.split, s.id): s for s in (samples if samples is not None else _load_samples(run_dir, hooks))}
    outcomes: dict[tuple[str, str], tuple[str, dict[str, float]]] = {}
    queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    for meta in metas:
        queue.put_nowait(meta)

    async def worker() -> None:
        while not queue.empty():
            meta = queue.get_nowait()
            key = (meta["split"], meta["id"])
            outcomes[key] = await _score_one(run, meta, judge, by_key.get(key), hooks)

    tasks = [asyncio.create_task(worker()) for _ in range(max(1, workers))]
    try:
        await asyncio.gather(*tasks)
    finally:  # on JudgeUnreachable (or cancellation) stop the other workers before returning
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    summary: Summary = hooks.summarise(judge.info, metas, outcomes)
    write_json_atomic(run_dir / SCORES_DIR / "summary.json", summary.to_json())
    return summary


def _metas(run: RunDir) -> list[dict[str, Any]]:
    if not run.root.is_dir():
        raise RunError(f"{run.root} is not a directory")
    try:
        metas = list(run.metas())
    except (OSError, json.JSONDecodeError) as exc:
        raise RunError(f"{run.root}: unreadable sample metadata: {exc}") from exc
    if not metas and not (run.root / "run.json").is_file():
        raise RunError(f"{run.root} is not a run folder (no run.json and no records/<split>/<id>.meta.json)")
    for meta in metas:
        if not isinstance(meta.get("split"), str) or not isinstance(meta.get("id"), str):
            raise RunError(f"{run.root}: a sample's meta.json names no split and id: {str(meta)[:200]}")
    return metas


def _load_samples(run_dir: Path, benchmark: Benchmark) -> Sequence[MediaSample]:
    try:
        dataset = json.loads((run_dir / "run.json").read_text(encoding="utf-8"))["dataset"]
        selection = benchmark.selection_from_json(dataset.get("selection") or {})
        return benchmark.load_dataset(dataset["source"], selection).samples
    except (OSError, KeyError, TypeError, json.JSONDecodeError) as exc:
        raise RunError(f"{run_dir}/run.json does not name the run's dataset: {exc!r}") from exc
    except ValueError as exc:  # DatasetError
        raise RunError(f"cannot load the run's dataset: {exc}") from exc


async def _score_one(
    run: RunDir, meta: Mapping[str, Any], judge: Judge, sample: MediaSample | None, benchmark: Benchmark
) -> tuple[str, dict[str, float]]:
    """The sample's outcome (`scored`, `cached`, `skipped` or `error`) and its scores."""
    split, sample_id = meta["split"], meta["id"]
    score_path = run.root / SCORES_DIR / split / f"{sample_id}.json"
    trace_path = score_path.with_suffix(".trace.jsonl")
    response_path = run.sentences_path(split, sample_id)
    if meta.get("status") != "published" or not response_path.is_file():
        score_path.unlink(missing_ok=True)
        trace_path.unlink(missing_ok=True)
        return "skipped", {}
    response = response_path.read_bytes()
    digest = hashlib.sha256(response).hexdigest()
    cached = _cached(score_path, digest, judge.info)
    if cached is not None:
        return "cached", cached
    record: dict[str, Any] = {
        "split": split,
        "id": sample_id,
        "family": meta.get("family"),
        "task": meta.get("task"),
        "judge": judge.info.to_json(),
        "response_sha256": digest,
    }
    try:
        result = await judge.score(benchmark.score_request(meta, response, sample))
    except ScoringError as exc:
        record |= {"status": "error", "error": str(exc), "scores": None, "details": None}
        trace = exc.trace
        outcome, scores = "error", {}
    else:
        record |= {"status": "scored", "error": None, "scores": result.scores, "details": result.details}
        trace = result.trace
        outcome, scores = "scored", result.scores
    record["scored_at"] = datetime.now(UTC).isoformat(timespec="seconds")
    _write_trace(trace_path, trace, judge.info)
    write_json_atomic(score_path, record)
    return outcome, scores


def _cached(path: Path, digest: str, info: JudgeInfo) -> dict[str, float] | None:
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None
    if (
        record.get("status") == "scored"
        and record.get("response_sha256") == digest
        and info.same_scores_as(record.get("judge") or {})
        and isinstance(record.get("scores"), dict)
    ):
        return {k: float(v) for k, v in record["scores"].items()}
    return None


def _write_trace(path: Path, trace: list[dict[str, Any]], info: JudgeInfo) -> None:
    if not trace:
        path.unlink(missing_ok=True)
        return
    lines = (json.dumps({**line, "judge": info.to_json()}, ensure_ascii=False) + "\n" for line in trace)
    write_bytes_atomic(path, "".join(lines).encode("utf-8"))
