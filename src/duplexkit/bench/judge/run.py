"""Score a run folder: every published sample judged once, cached, summarised.

Writes under RUN_DIR/scores/: `<split>/<id>.json` per published sample, `<split>/<id>.trace.jsonl` when a
judge reply of that sample needed a follow-up, and `summary.json`. Every file names the judge (kind, model,
URL, prompt version and source).

- Failed samples (meta `status: failed`, or no `<id>.json`) are never judged; they count in `total` and
  `skipped`, score 0 in the means, and any stale score of theirs is removed.
- A score file is reused only when its status is `scored` and the response file's sha256, the judge model,
  the judge URL and the prompt version all match; anything else is judged again.
- A sample the judge cannot score (`ScoringError`) gets a score file with `status: error` and counts in
  `errors`; it is excluded from the means (the summary says `complete: false`) and retried next time.
- Means: RTD `mean_content_score` / `mean_avg_temporal_score` and PR `mean_all_success`, overall and per
  task, over the scored and skipped samples; `null` when there are none.
- Samples whose meta says `clock: invalid` (as-fast-as-possible pace) are refused unless
  `allow_invalid_clock`: their sentence times are not media times.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from duplexkit.bench.artifacts import RunDir, write_bytes_atomic, write_json_atomic
from duplexkit.bench.judge.base import Judge, JudgeInfo, ScoreRequest, ScoringError
from duplexkit.bench.judge.builtin import NOT_COMPARABLE
from duplexkit.client.sentences import TimedSentence

SCORES_DIR = "scores"


class RunError(ValueError):
    """The run folder cannot be scored as asked (missing, unreadable, or clock=invalid without consent)."""


class MediaSample(Protocol):
    """What scoring needs from a dataset sample (`duplexkit.bench.datasets.Sample` is one)."""

    @property
    def split(self) -> str: ...
    @property
    def id(self) -> str: ...
    @property
    def ground_truth(self) -> Mapping[str, Any] | None: ...
    def video_bytes(self) -> bytes | None: ...


@dataclass
class _Group:
    samples: int = 0
    scored: int = 0
    skipped: int = 0
    errors: int = 0
    totals: dict[str, float] = field(default_factory=dict)

    def add(self, outcome: str, scores: Mapping[str, float], keys: tuple[str, ...]) -> None:
        self.samples += 1
        if outcome == "error":
            self.errors += 1
            return
        if outcome == "skipped":
            self.skipped += 1
        else:
            self.scored += 1
        for key in keys:
            self.totals[key] = self.totals.get(key, 0.0) + scores.get(key, 0.0)

    def to_json(self, means: Mapping[str, str]) -> dict[str, Any]:
        counted = self.scored + self.skipped
        out: dict[str, Any] = {
            mean: round(self.totals.get(key, 0.0) / counted, 4) if counted else None
            for mean, key in means.items()
        }
        return out | {
            "samples": self.samples,
            "scored": self.scored,
            "skipped": self.skipped,
            "errors": self.errors,
        }


_MEANS = {
    "rtd": {"mean_content_score": "content_score", "mean_avg_temporal_score": "avg_temporal_score"},
    "pr": {"mean_all_success": "all_success"},
}


@dataclass(frozen=True)
class Summary:
    """What `scores/summary.json` holds; `coverage` has total, scored, skipped, errors, cached."""

    judge: JudgeInfo
    coverage: Mapping[str, int]
    rtd: Mapping[str, Any]
    pr: Mapping[str, Any]

    @property
    def complete(self) -> bool:
        """Every published sample has a score (no judge errors)."""
        return self.coverage["errors"] == 0

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"judge": self.judge.to_json()}
        if self.judge.kind == "builtin":
            out["note"] = NOT_COMPARABLE
        return out | {
            "complete": self.complete,
            "coverage": dict(self.coverage),
            "rtd": self.rtd,
            "pr": self.pr,
        }


async def score_run(
    run_dir: Path,
    judge: Judge,
    *,
    workers: int = 4,
    samples: Iterable[MediaSample] | None = None,
    allow_invalid_clock: bool = False,
) -> Summary:
    """Score every published sample of `run_dir` with `judge`, `workers` samples at a time; write and return
    the summary.

    `samples` are the run's dataset samples (for video and ground truth); by default the dataset that
    `run.json` records (`dataset.source` and `dataset.selection`) is loaded. Raises RunError (nothing
    written) when the folder is not a run, its dataset cannot be loaded, or it holds published `clock:
    invalid` samples without `allow_invalid_clock`; `JudgeUnreachable` aborts the run (scores written so
    far stay and are reused next time).
    """
    run = RunDir(run_dir)
    metas = _metas(run)
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
    by_key = {(s.split, s.id): s for s in (samples if samples is not None else _load_samples(run_dir))}
    outcomes: dict[tuple[str, str], tuple[str, dict[str, float]]] = {}
    queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    for meta in metas:
        queue.put_nowait(meta)

    async def worker() -> None:
        while not queue.empty():
            meta = queue.get_nowait()
            key = (meta["split"], meta["id"])
            outcomes[key] = await _score_one(run, meta, judge, by_key.get(key))

    tasks = [asyncio.create_task(worker()) for _ in range(max(1, workers))]
    try:
        await asyncio.gather(*tasks)
    finally:  # on JudgeUnreachable (or cancellation) stop the other workers before returning
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    summary = _summarise(judge.info, metas, outcomes)
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
        raise RunError(f"{run.root} is not a run folder (no run.json and no <split>/<id>.meta.json)")
    for meta in metas:
        if not isinstance(meta.get("split"), str) or not isinstance(meta.get("id"), str):
            raise RunError(f"{run.root}: a sample's meta.json names no split and id: {str(meta)[:200]}")
    return metas


def _load_samples(run_dir: Path) -> tuple[MediaSample, ...]:
    from duplexkit.bench.datasets import Selection, load_dataset

    try:
        dataset = json.loads((run_dir / "run.json").read_text(encoding="utf-8"))["dataset"]
        raw = dataset.get("selection") or {}
        selection = Selection(
            splits=tuple(raw.get("splits") or ()),
            family=raw.get("family") or "all",
            ids=tuple(raw.get("ids") or ()),
            exclude_ids=tuple(raw.get("exclude_ids") or ()),
            limit=raw.get("limit"),
        )
        return load_dataset(dataset["source"], selection).samples
    except (OSError, KeyError, TypeError, json.JSONDecodeError) as exc:
        raise RunError(f"{run_dir}/run.json does not name the run's dataset: {exc!r}") from exc
    except ValueError as exc:  # DatasetError
        raise RunError(f"cannot load the run's dataset: {exc}") from exc


async def _score_one(
    run: RunDir, meta: Mapping[str, Any], judge: Judge, sample: MediaSample | None
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
        result = await judge.score(_request(meta, response, sample))
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


def _request(meta: Mapping[str, Any], response: bytes, sample: MediaSample | None) -> ScoreRequest:
    try:
        items = json.loads(response)
        sentences = tuple(
            TimedSentence(str(s["sentence"]), float(s["start"]), float(s["end"])) for s in items
        )
    except (ValueError, TypeError, KeyError) as exc:
        raise ScoringError(f"unreadable response file: {exc!r}") from exc
    fields = meta.get("sample") or {}
    reminders = tuple(
        t for t in (_seconds(fields.get("reminder1")), _seconds(fields.get("reminder2"))) if t is not None
    )
    family = meta.get("family")
    if family not in ("rtd", "pr"):
        raise ScoringError(f"the sample's meta has no family rtd/pr (got {family!r})")
    return ScoreRequest(
        split=meta["split"],
        id=meta["id"],
        family=family,
        task=str(meta.get("task") or meta["split"]),
        sentences=sentences,
        question=str(fields.get("question_text") or ""),
        answer1=fields.get("answer1"),
        answer2=fields.get("answer2"),
        reminders=reminders,
        video_duration=_seconds(fields.get("video_duration")),
        load_video=sample.video_bytes if sample is not None else lambda: None,
        ground_truth=sample.ground_truth if sample is not None else None,
    )


def _seconds(value: Any) -> float | None:
    """A non-negative finite time in seconds, else None (absent, empty or a sentinel such as -1)."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) and number >= 0 else None


def _write_trace(path: Path, trace: list[dict[str, Any]], info: JudgeInfo) -> None:
    if not trace:
        path.unlink(missing_ok=True)
        return
    lines = (json.dumps({**line, "judge": info.to_json()}, ensure_ascii=False) + "\n" for line in trace)
    write_bytes_atomic(path, "".join(lines).encode("utf-8"))


def _summarise(
    info: JudgeInfo,
    metas: list[dict[str, Any]],
    outcomes: Mapping[tuple[str, str], tuple[str, dict[str, float]]],
) -> Summary:
    counts = dict.fromkeys(("total", "scored", "skipped", "errors", "cached"), 0)
    families: dict[str, _Group] = {"rtd": _Group(), "pr": _Group()}
    tasks: dict[str, dict[str, _Group]] = {"rtd": {}, "pr": {}}
    for meta in metas:
        outcome, scores = outcomes[(meta["split"], meta["id"])]
        counts["total"] += 1
        counts["cached"] += outcome == "cached"
        outcome = "scored" if outcome == "cached" else outcome
        counts[{"scored": "scored", "skipped": "skipped", "error": "errors"}[outcome]] += 1
        family = meta.get("family")
        if family not in families:
            continue
        keys = tuple(_MEANS[family].values())
        families[family].add(outcome, scores, keys)
        task = str(meta.get("task") or meta["split"])
        tasks[family].setdefault(task, _Group()).add(outcome, scores, keys)
    sections = {
        family: families[family].to_json(_MEANS[family])
        | {"by_task": {task: group.to_json(_MEANS[family]) for task, group in sorted(tasks[family].items())}}
        for family in families
    }
    return Summary(judge=info, coverage=counts, rtd=sections["rtd"], pr=sections["pr"])
