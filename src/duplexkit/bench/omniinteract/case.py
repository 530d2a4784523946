"""One OmniInteract case as loaded: its questions and reference answers (`QA`), video and ground truth."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from duplexkit.bench.sources import Media

SceneType = Literal["nested", "multi_turn", "1qna"]


@dataclass(frozen=True)
class QA:
    """One expected response: the question that asks for it and the reference answer, in seconds."""

    question_time: float
    question_text: str
    answer_time: float
    answer_text: str
    question_type: str
    """`realtime` or `proactive` (1Q1A); the annotation's `label` or `1qna` (1QnA)."""
    interrupted: bool


@dataclass(frozen=True)
class Case:
    """One OmniInteract stream: its video, its annotation and, for the built-in set, its ground truth.

    `split` is the subset; `id` the video's path below its `videos*/` folder without the suffix, with `/`
    written as `__` so it is one path component. `qas` are in annotation order; for 1QnA they are the steps,
    all sharing the one question.
    """

    split: str
    id: str
    scene_type: SceneType
    qas: tuple[QA, ...]
    annotation: str
    """The annotation file, for error messages and the run's metadata."""
    video: Media | None = None
    ground_truth: Mapping[str, Any] | None = field(default=None, hash=False)

    @property
    def key(self) -> str:
        return f"{self.split}/{self.id}"

    @property
    def subset(self) -> str:
        return self.split

    def video_bytes(self) -> bytes | None:
        return None if self.video is None else self.video.read()
