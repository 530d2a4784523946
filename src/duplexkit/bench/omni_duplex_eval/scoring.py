"""Omni-DuplexEval's side of `duplexkit score`: the request built from a published sample, and the summary.

- A request carries the timed sentences, the dataset fields the meta recorded, the reminder times that are
  valid (non-negative, finite), and the sample's video and ground truth on demand.
- Means: RTD `mean_content_score` / `mean_avg_temporal_score` and PR `mean_all_success`, overall and per
  task, over every attempted sample: a failed (skipped) sample and one the judge could not score (an error)
  count as 0, so a judge outage lowers the mean visibly instead of shrinking its denominator; the summary
  then says `complete: false`. `null` when there are no samples.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from duplexkit.bench.judge.base import JudgeInfo, ScoringError
from duplexkit.bench.judge.run import coverage
from duplexkit.bench.omni_duplex_eval.builtin_judge import NOT_COMPARABLE
from duplexkit.bench.omni_duplex_eval.dataset import Sample
from duplexkit.bench.omni_duplex_eval.request import ScoreRequest
from duplexkit.client.sentences import TimedSentence


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
        elif outcome == "skipped":
            self.skipped += 1
        else:
            self.scored += 1
        for key in keys:  # errors and skipped samples have no scores: they add 0
            self.totals[key] = self.totals.get(key, 0.0) + scores.get(key, 0.0)

    def to_json(self, means: Mapping[str, str]) -> dict[str, Any]:
        counted = self.samples
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


def score_request(meta: Mapping[str, Any], response: bytes, sample: Sample | None) -> ScoreRequest:
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


def summarise(
    info: JudgeInfo,
    metas: Sequence[Mapping[str, Any]],
    outcomes: Mapping[tuple[str, str], tuple[str, dict[str, float]]],
) -> Summary:
    families: dict[str, _Group] = {"rtd": _Group(), "pr": _Group()}
    tasks: dict[str, dict[str, _Group]] = {"rtd": {}, "pr": {}}
    for meta in metas:
        outcome, scores = outcomes[(meta["split"], meta["id"])]
        outcome = "scored" if outcome == "cached" else outcome
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
    return Summary(judge=info, coverage=coverage(metas, outcomes), rtd=sections["rtd"], pr=sections["pr"])


def summary_lines(recorded: Mapping[str, Any]) -> list[str]:
    """The terminal lines of a summary's JSON: RTD and PR means, overall and per task (families run)."""
    lines = []
    for name, section, means in (
        ("RTD", recorded["rtd"], ("mean_content_score", "mean_avg_temporal_score")),
        ("PR", recorded["pr"], ("mean_all_success",)),
    ):
        if section["samples"]:
            lines.append(_row(name, section, means))
            lines += [_row(f"  {task}", group, means) for task, group in section["by_task"].items()]
    return lines


def _row(label: str, group: Mapping[str, Any], means: tuple[str, ...]) -> str:
    """Every mean is a score (content, timing, success): higher is better, marked ↑."""
    values = "  ".join(f"{m} ↑={'-' if group[m] is None else format(group[m], '.3f')}" for m in means)
    return f"{label}: {values}  (n={group['samples']})"
