"""What an Omni-DuplexEval judge is asked about one published sample (`ScoreRequest`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from duplexkit.client.sentences import TimedSentence


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
