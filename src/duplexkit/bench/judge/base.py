"""What every judge shares: who it is (`JudgeInfo`), what it is asked (`ScoreRequest`), what it answers
(`SampleScore`), and the `Judge` protocol that `score_run` drives.

A judge scores one published sample at a time. It raises `ScoringError` when that sample cannot be scored
(the sample is then recorded as an error and retried on the next run); any other exception aborts the run.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from duplexkit.bench.judge.windows import REMINDER_WINDOW_S
from duplexkit.client.sentences import TimedSentence


class ScoringError(RuntimeError):
    """One sample could not be scored; the message says why, `trace` keeps any parse-failure trace so far."""

    def __init__(self, message: str, trace: list[dict[str, Any]] | None = None) -> None:
        super().__init__(message)
        self.trace = trace or []


@dataclass(frozen=True)
class JudgeInfo:
    """Recorded in every score file: scores are only comparable under the same model, URL and prompts."""

    kind: Literal["llm", "builtin"]
    model: str
    url: str | None
    prompt_version: str
    prompt_source: str
    reminder_window_s: float = REMINDER_WINDOW_S
    """PR reminders are judged on the sentences starting in [t, t + this]."""

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "model": self.model,
            "url": self.url,
            "prompt_version": self.prompt_version,
            "prompt_source": self.prompt_source,
            "reminder_window_s": self.reminder_window_s,
        }

    def same_scores_as(self, recorded: Mapping[str, Any]) -> bool:
        """Whether a score recorded under `recorded` (a `to_json` dict) would be reproduced by this judge."""
        window = recorded.get("reminder_window_s", REMINDER_WINDOW_S)
        return (recorded.get("model"), recorded.get("url"), recorded.get("prompt_version"), window) == (
            self.model,
            self.url,
            self.prompt_version,
            self.reminder_window_s,
        )


@dataclass(frozen=True)
class ScoreRequest:
    """One published sample: its response, the dataset fields the rubric needs, and its media on demand.

    `task` is the RTD split name or `correction` / `event_reminder` / `post_event_reminder`; `reminders` are
    the sample's valid event times (s). `load_video` reads the clip's bytes (blocking; None when the run's
    dataset has no video for the sample); `ground_truth` exists for the built-in dataset only.
    """

    split: str
    id: str
    family: Literal["rtd", "pr"]
    task: str
    sentences: tuple[TimedSentence, ...]
    question: str
    answer1: str | None
    answer2: str | None
    reminders: tuple[float, ...]
    video_duration: float | None
    load_video: Callable[[], bytes | None]
    ground_truth: Mapping[str, Any] | None


@dataclass
class SampleScore:
    """A judge's scores for one sample.

    `scores`: RTD `content_score` (0-3) and `avg_temporal_score` (0-3); PR `all_success` (0/1). `details`: the
    per-sentence / per-event record. `trace`: for each judge call whose reply failed to parse, both attempts
    (the first names the parse error); empty when every reply parsed.
    """

    scores: dict[str, float]
    details: dict[str, Any]
    trace: list[dict[str, Any]] = field(default_factory=list)


class Judge(Protocol):
    info: JudgeInfo

    async def score(self, request: ScoreRequest) -> SampleScore:
        """Score one sample; raise ScoringError when it cannot be scored."""
        ...

    async def aclose(self) -> None:
        """Release connections; the caller that made the judge closes it after the last `score`."""
        ...
